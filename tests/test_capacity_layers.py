"""The capacity core imports one way: types and rules at the bottom (numeric, spec, kv, pool, overhead,
weights), the engine profiles above them, the estimate and the grid on top. Read with `ast`, function-local
and TYPE_CHECKING imports included, a package counting as imported with any of its modules."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_architecture import strongly_connected

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("capacity", "models_registry", "warehouse", "pipelines")

# the modules of the core; another room's loops (placement / procurement) are not this test's
CORE = (
    "capacity.memo",
    "capacity.sql_expr",
    "capacity.numeric",
    "capacity.dtypes",
    "capacity.parallel",
    "capacity.kv",
    "capacity.kv_bytes",
    "capacity.pool",
    "capacity.overhead",
    "capacity.weights",
    "capacity.engines",
    "capacity.estimate",
    "capacity.grid.columns",
    "capacity.grid.options",
    "capacity.grid.staged",
    "capacity.grid.speed",
    "capacity.grid.planning",
    "capacity.grid.sizing",
    "capacity.grid.frames",
    "capacity.grid.contexts",
    "capacity.grid.view",
    "capacity.grid.limits",
    "capacity.grid.tables",
    "capacity.grid",
    "capacity.calibration",
    "capacity.explain",
    "capacity.performance",
    "capacity.spec",
    "capacity.engine_constants",
)
BOTTOM = ("capacity.sql_expr", "capacity.numeric", "capacity.spec", "capacity.kv", "capacity.pool", "capacity.parallel", "capacity.kv_bytes")
# what a layer may not import: (modules, the modules above them)
BELOW = (
    ((*BOTTOM, "capacity.overhead"), ("capacity.engines", "capacity.estimate", "capacity.grid", "capacity.weights")),
    (("capacity.engines",), ("capacity.estimate", "capacity.grid", "capacity.calibration")),
)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                found = resolve(target)
                parts = (found or "").split(".")
                # importing a.b.c runs the package a.b first
                for i in range(2, len(parts) + 1):
                    parent = ".".join(parts[:i])
                    if parent in modules and parent != name and not name.startswith(parent + "."):
                        edges[name].add(parent)
    return edges


def _in_core(name: str, roots: tuple[str, ...] = CORE) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def test_no_import_cycle_through_the_core() -> None:
    cycles = [c for c in strongly_connected(_graph()) if any(_in_core(name) for name in c)]
    assert cycles == []


def test_the_core_imports_one_way() -> None:
    edges = _graph()
    wrong = [
        (name, target)
        for lower, upper in BELOW
        for name, targets in edges.items()
        if _in_core(name, lower)
        for target in targets
        if _in_core(target, upper)
    ]
    assert wrong == []


def test_the_capacity_package_needs_no_other_room() -> None:
    edges = _graph()
    outside = sorted(
        (name, target)
        for name, targets in edges.items()
        if name.startswith("capacity")
        for target in targets
        if not target.startswith("capacity")
    )
    assert outside == []


def test_the_engine_package_root_imports_no_engine() -> None:
    edges = _graph()
    assert {t for t in edges["capacity.engines"] if t.startswith("capacity.engines.")} <= {
        "capacity.engines.kinds",
        "capacity.engines.protocol",
    }
    assert not (ROOT / "capacity" / "memory.py").exists()


def test_the_grid_modules_import_one_way() -> None:
    """Each module of the `capacity.grid` package imports only the grid modules listed before it in CORE,
    and CORE lists them all."""
    grid = tuple(name for name in CORE if name.startswith("capacity.grid."))
    assert {name for name in _modules() if name.startswith("capacity.grid.")} == set(grid)
    edges = _graph()
    wrong = [(name, target) for i, name in enumerate(grid) for target in edges[name] if target in grid[i:]]
    assert wrong == []
