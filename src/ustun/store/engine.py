"""One `Database` per process: the async engine for SQLite or PostgreSQL, tuned for each.

SQLite runs in WAL mode with foreign keys on and a busy timeout; write transactions start with
`BEGIN IMMEDIATE` (so two writers never deadlock on a lock upgrade) and are serialised within
the process by an asyncio lock, so they queue without spinning on the busy handler. Reads run
concurrently with the writer: one statement in autocommit mode (its own snapshot, no BEGIN or
COMMIT), or a deferred transaction when several statements must see one snapshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolResetState

from ustun.store.autocommit import AutocommitPool, SqliteReaders
from ustun.store.uow import (
    WRITE_OPTION,
    Held,
    UnitOfWork,
    current_hold,
    current_unit_of_work,
)

SQLITE_BUSY_TIMEOUT_MS = 30_000
_SQLITE_READERS = 4  # aiosqlite connections (a thread each) for one-statement reads
_AUTOCOMMIT = "ustun_autocommit"


def async_url(url: str) -> str:
    """Map `sqlite:///…` and `postgresql://…` to their async drivers; leave explicit ones."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        # SQLAlchemy's own message may quote the URL, password included.
        raise ValueError(
            "not a database URL: use sqlite:///path or postgresql://user@host/db"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite":
        return str(parsed.set(drivername="sqlite+aiosqlite")) if driver in ("", "pysqlite") else url
    if backend in ("postgresql", "postgres"):
        if driver in ("", "psycopg2", "psycopg"):
            return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
        return url
    raise ValueError(
        f"unsupported database URL {parsed.drivername!r}: use sqlite:///path or postgresql://…"
    )


class Database:
    """The engine plus the rules for starting read and write transactions on it."""

    def __init__(self, url: str, *, pool_size: int = 10, echo: bool = False) -> None:
        self.url = async_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        kwargs: dict[str, Any] = {"echo": echo}
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
            # `_configure_sqlite` rolls back on return only what is still open.
            kwargs["pool_reset_on_return"] = None
        else:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=False)
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        self._reader = self.engine.execution_options(
            **({_AUTOCOMMIT: True} if self.is_sqlite else {"isolation_level": "AUTOCOMMIT"})
        )
        # PostgreSQL's READ COMMITTED takes a new snapshot per statement; SQLite's is one anyway.
        self._snapshot = (
            self.engine
            if self.is_sqlite
            else self.engine.execution_options(isolation_level="REPEATABLE READ")
        )
        self._write_lock = asyncio.Lock() if self.is_sqlite else None
        self._autocommit = None if self.is_sqlite else AutocommitPool(self.dsn, pool_size)
        path = self.engine.url.database
        self._sqlite_readers = (
            SqliteReaders(path, _SQLITE_READERS, SQLITE_BUSY_TIMEOUT_MS)
            if self.is_sqlite and path and path != ":memory:" and "mode=memory" not in self.url
            else None
        )
        if self.is_sqlite:
            _configure_sqlite(self.engine)

    @property
    def dsn(self) -> str:
        """The URL as a plain `postgresql://…` DSN, for asyncpg's own connections."""
        url = self.engine.url.set(drivername=self.engine.dialect.name)
        return url.render_as_string(hide_password=False)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[UnitOfWork]:
        """One write transaction; joins the unit of work already open in this context, if any."""
        ambient = current_unit_of_work()
        if ambient is not None:
            yield ambient
            return
        held = self._held_here()
        if held is not None:
            yield await held.begin()
            return
        async with self._write() as uow:
            yield uow

    def in_unit_of_work(self) -> bool:
        """Whether `unit_of_work()` would join a unit of work already open in this context."""
        return current_unit_of_work() is not None or self._held_here() is not None

    def _held_here(self) -> Held | None:
        """The hold this context runs in, if it holds a unit of work of this database."""
        held = current_hold()
        return held if held is not None and held.owner is self else None

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[asyncpg.Connection]:
        """A PostgreSQL connection for ONE statement that commits by itself (no transaction).

        For hot paths outside any unit of work (see `in_unit_of_work`), or a short transaction
        of their own (`conn.transaction()`) when they need `SET LOCAL`; not on SQLite.
        """
        if self._autocommit is None:
            raise RuntimeError("autocommit() is for PostgreSQL; on SQLite use unit_of_work()")
        async with self._autocommit.connection() as conn:
            yield conn

    @asynccontextmanager
    async def driver_reader(self) -> AsyncIterator[Any]:
        """A driver connection for ONE read statement outside any unit of work, off
        SQLAlchemy's pool: asyncpg from `autocommit()`, or aiosqlite in autocommit mode.

        Yields None where there is none (an in-memory SQLite database): use `read()` then.
        """
        if self._autocommit is not None:
            async with self._autocommit.connection() as conn:
                yield conn
        elif self._sqlite_readers is not None:
            async with self._sqlite_readers.connection() as reader:
                yield reader
        else:
            yield None

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[Held]:
        """Defer the commit of the next unit of work opened in this block to the block's end.

        The transaction (and SQLite's write lock) starts only when something in the block first
        calls `unit_of_work()` or `held.begin()`; every later call joins it; it commits when the
        block exits cleanly and rolls back if it raises. Not for nesting.
        """
        async with Held.run(self, lambda: self._write(ambient=False)) as held:
            yield held

    @asynccontextmanager
    async def _write(self, *, ambient: bool = True) -> AsyncIterator[UnitOfWork]:
        if self._write_lock is None:
            async with self.engine.connect() as conn, UnitOfWork.run(conn, ambient=ambient) as uow:
                yield uow
            return
        async with self._write_lock, self.engine.connect() as conn:
            await conn.execution_options(**{WRITE_OPTION: True})
            async with UnitOfWork.run(conn, ambient=ambient) as uow:
                yield uow

    @asynccontextmanager
    async def read(self, *, snapshot: bool = False) -> AsyncIterator[AsyncConnection]:
        """A connection for reading; inside a unit of work, its connection (to see its writes).

        Each statement runs alone in autocommit mode (no BEGIN/COMMIT round trips); with
        `snapshot=True` all of them run in one read transaction and so see the same data.
        """
        ambient = current_unit_of_work()
        if ambient is not None:
            yield ambient.conn
            return
        if snapshot:
            async with self._snapshot.connect() as conn, conn.begin():
                yield conn
            return
        async with self._reader.connect() as conn:
            yield conn

    async def dispose(self) -> None:
        """Close every pooled connection."""
        if self._autocommit is not None:
            await self._autocommit.close()
        if self._sqlite_readers is not None:
            await self._sqlite_readers.close()
        await self.engine.dispose()


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event, not the driver, decide how transactions start.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.connection.driver_connection.in_transaction:
            return  # begun on the driver (`uow.sqlite_connection`)
        options = conn.get_execution_options()
        if not options.get(_AUTOCOMMIT, False):
            conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_OPTION, False) else "BEGIN")

    @event.listens_for(engine.sync_engine, "reset")
    def _on_reset(dbapi_conn: Any, record: Any, state: PoolResetState) -> None:
        # A unit of work or read() has ended its transaction already: the pool's usual rollback
        # on return would only be one more hand-off to aiosqlite's thread.
        if state.asyncio_safe and record.driver_connection.in_transaction:
            dbapi_conn.rollback()
