"""The rooms import one way: each package imports only the packages below it.

    capacity <- models_registry <- telemetry, evaluation <- warehouse <- recommendations <- pipelines

Every import statement counts, function-local and `TYPE_CHECKING` ones included: a loop hidden in a
function is still a loop. Read with `ast`, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> the packages it may import (its floor); telemetry and evaluation sit side by side
ALLOWED: dict[str, frozenset[str]] = {
    "capacity": frozenset(),
    "models_registry": frozenset({"capacity"}),
    "telemetry": frozenset({"capacity", "models_registry"}),
    "evaluation": frozenset({"capacity", "models_registry"}),
    "warehouse": frozenset({"capacity", "models_registry"}),
    "recommendations": frozenset({"capacity", "models_registry", "telemetry", "warehouse"}),
    "pipelines": frozenset({"capacity", "models_registry", "telemetry", "warehouse", "recommendations"}),
}


def imported_packages(path: Path) -> set[str]:
    """The top-level capplan packages one module imports (absolute imports; the packages use no relative ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & ALLOWED.keys()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_packages_below_it(package: str) -> None:
    upward = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - ALLOWED[package] - {package})
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {module: names for module, names in upward.items() if names} == {}


def test_the_allowed_imports_form_no_circle() -> None:
    """The table itself is a layer order: walking down from any package never comes back to it."""

    def below(package: str, seen: frozenset[str]) -> None:
        for lower in ALLOWED[package]:
            assert lower not in seen, f"{lower} is both above and below {package}"
            below(lower, seen | {lower})

    for package in ALLOWED:
        below(package, frozenset({package}))


def test_no_relative_imports_hide_an_edge() -> None:
    relative = [
        str(path.relative_to(ROOT))
        for package in ALLOWED
        for path in (ROOT / package).rglob("*.py")
        if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    ]
    assert relative == []
