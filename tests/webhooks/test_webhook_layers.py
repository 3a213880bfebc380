"""The webhooks pillar reaches storage only through its store: no driver, no hand-written SQL."""

from __future__ import annotations

import ast
from pathlib import Path

import ustun.webhooks

PACKAGE = Path(ustun.webhooks.__file__).parent
# Where SQL may live: the adapters and the table definitions they share.
STORAGE = {PACKAGE / "adapters", PACKAGE / "tables.py"}
DRIVERS = ("asyncpg", "aiosqlite", "sqlite3", "psycopg")
# Below the adapters only: the driver connections and prepared statements of `ustun.store`.
STORE_INTERNALS = ("ustun.store.uow", "ustun.store.statements", "ustun.store.autocommit")
# What a pillar module may take from SQLAlchemy: the types of the rows and connections it passes,
# and the URL parser (the secret box finds its key file beside a SQLite database).
SQLALCHEMY_TYPES = {"Row", "AsyncConnection", "make_url"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def test_no_pillar_module_imports_a_driver_or_builds_sql() -> None:
    modules = [
        p for p in PACKAGE.rglob("*.py") if not any(p == s or s in p.parents for s in STORAGE)
    ]
    assert PACKAGE / "sending" / "dispatcher.py" in modules
    for path in modules:
        for module, names in _imports(path):
            where = f"{path.relative_to(PACKAGE)} imports {module}"
            assert not module.startswith(DRIVERS), where
            assert not module.startswith(STORE_INTERNALS), where
            if module.startswith("sqlalchemy"):
                assert set(names) <= SQLALCHEMY_TYPES, f"{where}: {names}"
