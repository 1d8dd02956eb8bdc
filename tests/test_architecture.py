"""The shape of the code, read with `ast`: no import circles, the layer order between the top-level
packages, no module over 1,000 lines, no function over 100 lines, few `# fmt: skip`, and no engine or
layer kind chosen by comparing strings.

The checks are a ratchet (issue 20). Each has an allowlist of accepted violations, empty today: a
check fails when a violation appears that is not on its list, when a listed one grows, and when a
listed one is gone (then delete it from the list, as the message says). `FMT_SKIP_ALLOWED` is the exact
count, at most `FMT_SKIP_TARGET`.

How the import graph is read (the choices, and why):
- Nodes are the modules of the project's packages: the top-level folders with an `__init__.py` that
  `[tool.setuptools.packages.find] include` in pyproject.toml names. A package is the node of its
  `__init__.py` (`capacity.engines`).
- Every `import` statement counts, wherever it stands: a function-local import runs when the function
  is called and is the usual way a circle is hidden, so it is an edge like any other.
- `if TYPE_CHECKING:` imports count too. They never run, but the module still names the other's types:
  the dependency is in the design, and moving an import under TYPE_CHECKING hides a circle from the
  interpreter, not from the reader (`capacity.placement` and `capacity.procurement` are such a pair).
  This is also grimp's / import-linter's default.
- Relative imports are resolved against the importing module's package.
- `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg` (its
  `__init__`). `import a.b.c` is an edge to `a.b.c` only: the implicit runs of `a/__init__` and
  `a/b/__init__` are not edges, otherwise every `__init__` that re-exports a submodule would make a
  circle with each submodule that imports a sibling, a pattern Python resolves (the parent is always
  initialised first) and no reader has to untangle. An explicit import of the package itself
  (`from capacity.engines import Engine`) is an edge to its `__init__`, so a circle through an
  `__init__` is still found.
- `importlib.import_module` with a computed name is not read (the packages use none today).
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --- (b) the layers --------------------------------------------------------------------------------
# Each top-level package and the other top-level packages it may import; imports inside a package are
# always allowed. A new package needs a row here (the test says so), and belongs in the rows of the
# packages that may import it.
# Rows for a package that does not exist (yet) are harmless.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "capacity": frozenset(),  # the floor: pure, no I/O, imports none of the others
    "models_registry": frozenset({"capacity"}),
    # telemetry and evaluation sit side by side above the registry (evaluation: tools/ and tests/ call it)
    "telemetry": frozenset({"capacity", "models_registry"}),
    "evaluation": frozenset({"capacity", "models_registry"}),
    "warehouse": frozenset({"capacity", "models_registry"}),  # DuckDB only
    "recommendations": frozenset({"capacity", "models_registry", "telemetry", "warehouse"}),
    # the roof: nothing imports it
    "pipelines": frozenset({"capacity", "models_registry", "telemetry", "warehouse", "recommendations"}),
}
# Imports across layers that break the table today (importer module, imported module).
LAYER_ALLOWED: set[tuple[str, str]] = set()

# --- (a) import circles ----------------------------------------------------------------------------
# The strongly connected components of the module graph today, each a set of modules that reach one
# another. A component that shrinks fails too: replace its entry with the smaller one the message names.
CYCLES_ALLOWED: list[frozenset[str]] = []

# --- (c) module length -----------------------------------------------------------------------------
MAX_MODULE_LINES = 1000
# module: its line count today, a ceiling (it may shrink, not grow)
LONG_MODULES_ALLOWED: dict[str, int] = {}

# --- (d) function length ---------------------------------------------------------------------------
MAX_FUNCTION_LINES = 100  # from the `def` line to the last line of the body
# "module:Qualified.name": its line count today, a ceiling
LONG_FUNCTIONS_ALLOWED: dict[str, int] = {}

# --- (e) `# fmt: skip` -----------------------------------------------------------------------------
FMT_SKIP_TARGET = 40  # issue 20's bound
FMT_SKIP_ALLOWED = 23  # today's count in the packages, exact: lower it as skips go, down to the target

# --- (f) engines and layer kinds chosen by comparing strings ---------------------------------------
ENGINE_NAMES = frozenset({"vllm", "sglang", "trtllm", "plain"})  # compared with anything
# compared with an attribute of this name (`pool.unit == "block"`, `group.kind == "full"`)
ATTRIBUTE_VALUES = {
    "unit": frozenset({"block", "token", "byte"}),
    "kind": frozenset({"full", "sliding", "chunked", "mla", "state", "shared"}),
}
# Parsing at the edge, where outside text becomes an Engine / KVKind (patterns over module names, so
# they hold after the moves of issue 20): Hugging Face config.json, engine logs, metrics and tables.
PARSING_MODULES = (
    "capacity.hf_config",
    "capacity.hf_config.*",
    "*telemetry.*_log",
    "*telemetry.prometheus*",
    "*telemetry.tabular",
    "*telemetry.normalize",
)
# "module:function" (the enclosing function, or <module>): the number of such comparisons today, exact
STRING_CHOICES_ALLOWED: dict[str, int] = {}


# --- reading the code ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str  # dotted: "capacity.engines" for capacity/engines/__init__.py
    path: Path
    is_package: bool
    text: str
    tree: ast.Module

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def discover_packages() -> list[str]:
    """Top-level folders with an `__init__.py` that pyproject's packages.find `include` matches."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and any(fnmatch.fnmatchcase(p.name, pattern) for pattern in patterns)
    )


@cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for package in discover_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            text = path.read_text(encoding="utf-8")
            found[name] = Module(name, path, is_package, text, ast.parse(text, filename=str(path)))
    return found


def _top(module: str) -> str:
    return module.partition(".")[0]


def _known(name: str, mods: dict[str, Module]) -> str | None:
    """`name` if it is a module of ours, else its longest prefix that is (None outside the packages)."""
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_modules(module: Module, mods: dict[str, Module]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import of a project module, at any depth of the tree."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if target := _known(alias.name, mods):
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if (parent := _known(source, mods)) is None:
                continue
            for alias in node.names:
                yield (f"{source}.{alias.name}" if f"{source}.{alias.name}" in mods else parent), node.lineno


@cache
def import_graph() -> dict[str, frozenset[str]]:
    mods = modules()
    return {name: frozenset(t for t, _ in imported_modules(m, mods) if t != name) for name, m in mods.items()}


def strongly_connected(graph: Mapping[str, AbstractSet[str]]) -> list[frozenset[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(frozenset(component))
    return components


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones included ("outer.inner")."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def ratchet(found: dict[str, int], allowed: dict[str, int], list_name: str, *, exact: bool) -> list[str]:
    """What is wrong with `found` against its allowlist: new keys, counts above the allowed one, keys gone
    (and, when `exact`, counts below it); one readable line each."""
    problems = [f"new: {key} ({found[key]})" for key in sorted(found.keys() - allowed.keys())]
    for key in sorted(found.keys() & allowed.keys()):
        if found[key] > allowed[key]:
            problems.append(f"grew: {key} is {found[key]}, {list_name} allows {allowed[key]}")
        elif exact and found[key] < allowed[key]:
            problems.append(f"improved: {key} is {found[key]}: lower it to {found[key]} in {list_name}")
    problems += [f"fixed: {key} is gone: delete it from {list_name}" for key in sorted(allowed.keys() - found.keys())]
    return problems


# --- the checks ------------------------------------------------------------------------------------


def test_packages_are_discovered_and_placed_in_the_layer_table() -> None:
    packages = discover_packages()
    assert {"capacity", "pipelines"} <= set(packages), packages
    missing = [p for p in packages if p not in MAY_IMPORT]
    assert not missing, f"packages without a row in MAY_IMPORT (say which packages each may import): {missing}"
    assert strongly_connected(MAY_IMPORT) == [], "MAY_IMPORT must be an order: no two packages may import each other"
    assert len(modules()) > 20


def shortest_cycle(component: frozenset[str], graph: dict[str, frozenset[str]]) -> list[str]:
    """One shortest loop, for the message: through a module no allowed cycle holds, where there is one."""
    start = min(component - frozenset().union(*CYCLES_ALLOWED) or component)
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for succ in sorted(graph[node] & component):
            if succ == start:
                return [*paths[node], start]
            if succ not in paths:
                paths[succ] = [*paths[node], succ]
                queue.append(succ)
    return sorted(component)


def test_no_import_cycles() -> None:
    graph = import_graph()
    components = strongly_connected(graph)
    problems = []
    for component in components:
        if component in CYCLES_ALLOWED:
            continue
        wider = [allowed for allowed in CYCLES_ALLOWED if component < allowed]
        if wider:
            problems.append(f"shrunk: replace the CYCLES_ALLOWED entry {sorted(wider[0])} with {sorted(component)}")
        else:
            loop = " -> ".join(shortest_cycle(component, graph))
            problems.append(f"new import cycle of {len(component)} modules {sorted(component)}, e.g. {loop}")
    for allowed in CYCLES_ALLOWED:
        if not any(component & allowed for component in components):
            problems.append(f"fixed: the cycle {sorted(allowed)} is gone: delete it from CYCLES_ALLOWED")
    assert not problems, "\n".join(problems)


def test_layers_import_only_downwards() -> None:
    mods = modules()
    found = set()
    for name, module in mods.items():
        may = MAY_IMPORT.get(_top(name), frozenset())
        for target, _line in imported_modules(module, mods):
            if _top(target) != _top(name) and _top(target) not in may:
                found.add((name, target))
    problems = [
        f"new: {a} imports {b} ({_top(a)} may import {sorted(MAY_IMPORT.get(_top(a), ()))})"
        for a, b in sorted(found - LAYER_ALLOWED)
    ]
    problems += [f"fixed: {a} -> {b} is gone: delete it from LAYER_ALLOWED" for a, b in sorted(LAYER_ALLOWED - found)]
    assert not problems, "\n".join(problems)


def test_no_module_over_1000_lines() -> None:
    found = {name: len(m.text.splitlines()) for name, m in modules().items()}
    found = {name: n for name, n in found.items() if n > MAX_MODULE_LINES}
    problems = ratchet(found, LONG_MODULES_ALLOWED, "LONG_MODULES_ALLOWED", exact=False)
    assert not problems, "\n".join(problems)


def test_no_function_over_100_lines() -> None:
    found = {}
    for name, module in modules().items():
        for qualname, node in functions(module.tree):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found[f"{name}:{qualname}"] = length
    problems = ratchet(found, LONG_FUNCTIONS_ALLOWED, "LONG_FUNCTIONS_ALLOWED", exact=False)
    assert not problems, "\n".join(problems)


def test_fmt_skip_count() -> None:
    count = sum(m.text.count("# fmt: skip") for m in modules().values())
    assert FMT_SKIP_ALLOWED <= FMT_SKIP_TARGET, f"FMT_SKIP_ALLOWED may not exceed {FMT_SKIP_TARGET} (issue 20)"
    assert count <= FMT_SKIP_ALLOWED, f"{count} `# fmt: skip` in the packages: FMT_SKIP_ALLOWED is {FMT_SKIP_ALLOWED}"
    assert count == FMT_SKIP_ALLOWED, f"improved: {count} `# fmt: skip` left: lower FMT_SKIP_ALLOWED to {count}"


def _string_literals(node: ast.expr) -> set[str]:
    """The string constants `node` is, or holds as a tuple / list / set display."""
    elements = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def _chooses_by_string(left: ast.expr, right: ast.expr) -> bool:
    for subject, literal in ((left, right), (right, left)):
        values = _string_literals(literal)
        if values & ENGINE_NAMES:
            return True
        if isinstance(subject, ast.Attribute) and values & ATTRIBUTE_VALUES.get(subject.attr, frozenset()):
            return True
    return False


def string_choices(tree: ast.AST, where: str = "<module>") -> Iterator[str]:
    """The enclosing function of every `==` / `!=` / `in` / `not in` comparison, and every `match` case,
    that picks an engine or a layer kind / pool unit by its string."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner = node.name if where == "<module>" else f"{where}.{node.name}"
            yield from string_choices(node, inner)
            continue
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True):
                if isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) and _chooses_by_string(left, right):
                    yield where
        elif isinstance(node, ast.Match):
            for case in node.cases:
                patterns = [p for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue)]
                if any(_chooses_by_string(node.subject, p.value) for p in patterns):
                    yield where
        yield from string_choices(node, where)


def test_no_engine_or_layer_kind_chosen_by_string() -> None:
    found: dict[str, int] = {}
    for name, module in modules().items():
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in PARSING_MODULES):
            continue
        for where in string_choices(module.tree):
            key = f"{name}:{where}"
            found[key] = found.get(key, 0) + 1
    problems = ratchet(found, STRING_CHOICES_ALLOWED, "STRING_CHOICES_ALLOWED", exact=True)
    assert not problems, "\n".join(problems) + "\n(an Engine / KVKind member or a method of the object chooses)"
