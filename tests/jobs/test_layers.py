"""The jobs pillar's layers: SQL and drivers only in its adapters, and no import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ustun.jobs

PACKAGE = Path(ustun.jobs.__file__).parent
DRIVERS = ("asyncpg", "aiosqlite", "sqlalchemy.dialects")
# The modules that run jobs: loops and app-facing functions, no statements of their own.
LOOPS = ("queue", "runner", "sweeper", "context", "registry", "wakeup", "store")


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(path): ast.parse(path.read_text()) for path in PACKAGE.rglob("*.py")}


def _imports(tree: ast.Module) -> set[str]:
    """Every module `tree` imports, `from package import submodule` resolved to the submodule."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if f"{node.module}.{alias.name}" in MODULES
            )
    return found


def _outside_adapters() -> list[str]:
    return [name for name in MODULES if not name.startswith("ustun.jobs.adapters")]


@pytest.mark.parametrize("name", _outside_adapters())
def test_only_the_adapters_import_a_driver_or_check_the_dialect(name: str) -> None:
    tree = MODULES[name]
    assert not [m for m in _imports(tree) if m.startswith(DRIVERS)]
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"is_sqlite", "dialect", "driver"}


@pytest.mark.parametrize("name", [f"ustun.jobs.{module}" for module in LOOPS])
def test_the_loops_hold_no_sql(name: str) -> None:
    assert not [m for m in _imports(MODULES[name]) if m.startswith("sqlalchemy")]


def test_no_module_of_the_pillar_imports_itself_back() -> None:
    edges = {
        name: {
            m
            for m in _imports(tree)
            if m in MODULES and m != "ustun.jobs" and not name.startswith(f"{m}.")
        }
        for name, tree in MODULES.items()
    }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges[start] - seen:
            seen.add(nxt)
            if nxt == goal or reaches(nxt, goal, seen):
                return True
        return False

    assert [name for name in edges if reaches(name, name, set())] == []
