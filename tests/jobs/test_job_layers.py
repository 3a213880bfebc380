"""The jobs pillar's loops hold no SQL (drivers, dialects and circles: `tests/test_layers.py`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ustun.jobs

PACKAGE = Path(ustun.jobs.__file__).parent
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


@pytest.mark.parametrize("name", [f"ustun.jobs.{module}" for module in LOOPS])
def test_the_loops_hold_no_sql(name: str) -> None:
    assert not [m for m in _imports(MODULES[name]) if m.startswith("sqlalchemy")]
