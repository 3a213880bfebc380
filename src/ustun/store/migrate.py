"""Schema migrations with Alembic, driven from code (`ustun migrate`, `ustun serve`)."""

from __future__ import annotations

import asyncio
import weakref

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

from ustun.errors import SchemaOutOfDate, TablesMissing
from ustun.store.engine import Database
from ustun.store.uow import WRITE_OPTION

SCRIPT_LOCATION = "ustun.store:migrations"
# Any constant works: it only has to be the same for every ustun process sharing a database.
_PG_MIGRATION_LOCK = 0x75737475
_MIGRATING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _config(conn: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def head_revision() -> str | None:
    """The newest revision this version of ustun ships."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def _current(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


async def current_revision(db: Database) -> str | None:
    """The revision the database is at (None when it was never migrated)."""
    async with db.engine.connect() as conn:
        return await conn.run_sync(_current)


def _one_at_a_time() -> asyncio.Lock:
    """This event loop's migration lock: Alembic keeps the running migration in module globals
    (`alembic.context`, `alembic.op`), so two interleaved in one loop run into each other."""
    loop = asyncio.get_running_loop()
    lock = _MIGRATING.get(loop)
    if lock is None:
        lock = _MIGRATING[loop] = asyncio.Lock()
    return lock


async def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to `revision` (the newest); safe to run from many processes at once,
    and for several databases at once in one process."""

    def _upgrade(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            # A migration (and waiting for another process's) may take longer than a request.
            conn.execute(text("SET LOCAL statement_timeout = 0"))
            conn.execute(text("SET LOCAL lock_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        command.upgrade(_config(conn), revision)

    async with _one_at_a_time(), db.engine.connect() as conn:
        await conn.execution_options(**{WRITE_OPTION: True})
        async with conn.begin():
            await conn.run_sync(_upgrade)


async def check_current(db: Database) -> None:
    """Raise `SchemaOutOfDate` with what to do unless the schema is at the newest revision."""
    current, head = await current_revision(db), head_revision()
    if current != head:
        raise SchemaOutOfDate(
            f"database schema is at revision {current or 'none'}, this ustun needs {head}: "
            "run `ustun migrate` (or start `ustun serve` without --no-migrate)"
        )


async def ensure_tables(db: Database, *names: str, create: bool | None = None) -> None:
    """Make sure `names` exist, migrating to create them when `create` (default: on SQLite only).

    Never changes a PostgreSQL schema unless asked: there a missing table raises
    `TablesMissing` naming the command to run.
    """
    async with db.engine.connect() as conn:
        present = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    missing = [name for name in names if name not in present]
    if not missing:
        return
    if db.is_sqlite if create is None else create:
        await upgrade(db)
        return
    url = db.engine.url.set(drivername=db.dialect).render_as_string(hide_password=True)
    raise TablesMissing(
        f"table {missing[0]} is missing: run `ustun migrate` with USTUN_DATABASE_URL={url} "
        "(or pass create_tables=True)"
    )


class RequiredTables:
    """Tables a component needs, checked (or created) by `ensure_tables` once per process."""

    def __init__(self, db: Database, *names: str, create: bool | None = None) -> None:
        self.db = db
        self.names = names
        self.create = create
        self._ready = False
        self._checking = asyncio.Lock()

    async def ensure(self) -> None:
        """Check once, however many first requests arrive together; then return at once."""
        async with self._checking:
            if not self._ready:
                await ensure_tables(self.db, *self.names, create=self.create)
                self._ready = True
