"""The package's layers, read from its imports: drivers and dialect checks only in `store/` and
the pillars' storage adapters, and no import circle anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ustun

PACKAGE = Path(ustun.__file__).parent
DRIVERS = ("asyncpg", "aiosqlite", "sqlite3", "sqlalchemy.dialects", "redis")
DIALECT_CHECKS = {"is_sqlite", "dialect", "driver"}
# Where a database driver and the dialect may show: the store, and each pillar's adapters.
STORAGE = (
    "ustun.store",
    "ustun.jobs.adapters",
    "ustun.webhooks.adapters",
    "ustun.idempotency.sql",
    "ustun.idempotency.redis_store",
)


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _name(path): ast.parse(path.read_text())
    for path in PACKAGE.rglob("*.py")
    if "migrations" not in path.parts
}


def _resolved(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules an import statement names, `from package import submodule` included."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not node.module or node.level:
        return set()
    return {node.module} | {
        f"{node.module}.{alias.name}"
        for alias in node.names
        if f"{node.module}.{alias.name}" in MODULES
    }


def _all_imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found |= _resolved(node)
    return found


def _load_time_imports(tree: ast.Module) -> set[str]:
    """What importing the module imports: top-level statements, not `TYPE_CHECKING` blocks or
    imports inside functions (those run later, when the circle is closed)."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found |= _resolved(node)
        elif isinstance(node, ast.Try):
            for inner in node.body:
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    found |= _resolved(inner)
    return found


def _outside_storage() -> list[str]:
    return sorted(name for name in MODULES if not name.startswith(STORAGE))


@pytest.mark.parametrize("name", _outside_storage())
def test_only_the_store_and_the_adapters_touch_a_driver_or_the_dialect(name: str) -> None:
    tree = MODULES[name]
    assert not [m for m in _all_imports(tree) if m.startswith(DRIVERS)], f"{name} imports a driver"
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & DIALECT_CHECKS, f"{name} checks the dialect"


def test_no_import_circle() -> None:
    edges = {
        name: {
            m
            for m in _load_time_imports(tree)
            # A package's own __init__ runs before its modules: importing it is not a cycle.
            if m in MODULES
            and m != name
            and not name.startswith(f"{m}.")
            and not m.startswith(f"{name}.")
        }
        for name, tree in MODULES.items()
    }

    def circle_from(start: str) -> list[str] | None:
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    circles = [c for c in map(circle_from, sorted(edges)) if c is not None]
    assert circles == [], " -> ".join(circles[0])
