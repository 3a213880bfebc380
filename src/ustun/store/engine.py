"""One `Database` per process: the async engines for SQLite or PostgreSQL, tuned for each.

Writes and reads have pools of their own, so that reads (however many wait) never hold the
connections writes need, nor writes those of reads. Write transactions are admitted by
`FairShares`: one tenant (an account, as `on_behalf_of` names it) never holds every write
connection, and a freed one goes to the tenant holding fewest, so one account's pile-up (say,
hundreds of transfers queued on the same two rows) delays its own requests, not the others'.
A pooled connection the server has closed (a restart) is replaced at checkout, never lent.

SQLite runs in WAL mode with foreign keys on and a busy timeout; write transactions start with
`BEGIN IMMEDIATE` (so two writers never deadlock on a lock upgrade) and are admitted one at a
time within the process, so they queue without spinning on the busy handler. Reads run
concurrently with the writer: one statement in autocommit mode (its own snapshot, no BEGIN or
COMMIT), or a deferred transaction when several statements must see one snapshot.
PostgreSQL connections carry a `statement_timeout` and a `lock_timeout`.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolResetState
from sqlalchemy.util import await_only

from ustun.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT
from ustun.store.autocommit import AutocommitPool, SqliteReaders
from ustun.store.uow import (
    WRITE_OPTION,
    Held,
    UnitOfWork,
    current_hold,
    current_unit_of_work,
    sqlite_unit,
)

SQLITE_BUSY_TIMEOUT_MS = 30_000
_SQLITE_READERS = 4  # aiosqlite connections (a thread each) for one-statement reads
_AUTOCOMMIT = "ustun_autocommit"

# On whose behalf this context writes (an account id); None for the process's own work.
_tenant: contextvars.ContextVar[Hashable] = contextvars.ContextVar("ustun_tenant", default=None)


class on_behalf_of:  # lowercase: it reads as a function, `with on_behalf_of(account_id):`
    """Count the write transactions opened in this block against `tenant`'s fair share."""

    __slots__ = ("_tenant", "_token")

    def __init__(self, tenant: Hashable) -> None:
        self._tenant = tenant

    def __enter__(self) -> None:
        self._token = _tenant.set(self._tenant)

    def __exit__(self, *_: object) -> None:
        _tenant.reset(self._token)


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
    """The engines plus the rules for starting read and write transactions on them.

    `pool_size` is how many write transactions run at once; on PostgreSQL each of the three
    other kinds of connection (reads, one-statement writes, driver reads) gets half as many, so
    one process holds at most 2.5 x `pool_size` connections (25 by default: a few processes
    fit in PostgreSQL's default of 100). `statement_timeout` and `lock_timeout` (seconds;
    None or 0: none) bound every statement and every lock wait on PostgreSQL.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        echo: bool = False,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        self.url = async_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        path = make_url(self.url).database
        in_memory = self.is_sqlite and (path in (None, "", ":memory:") or "mode=memory" in self.url)
        half = max(1, pool_size // 2)
        timeouts = _server_settings(statement_timeout=statement_timeout, lock_timeout=lock_timeout)
        if self.is_sqlite:
            options: dict[str, Any] = {
                "echo": echo,
                "connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
                # `_configure_sqlite` rolls back on return only what is still open.
                "pool_reset_on_return": None,
            }
            self.engine: AsyncEngine = create_async_engine(self.url, **options)
            # An in-memory database exists once per connection: its reads share its one pool.
            self._reads = self.engine if in_memory else create_async_engine(self.url, **options)
        else:
            options = {"echo": echo, "connect_args": {"server_settings": timeouts}}
            self.engine = create_async_engine(
                self.url, pool_size=pool_size, max_overflow=0, **options
            )
            self._reads = create_async_engine(self.url, pool_size=half, max_overflow=0, **options)
        self._reader = self._reads.execution_options(
            **({_AUTOCOMMIT: True} if self.is_sqlite else {"isolation_level": "AUTOCOMMIT"})
        )
        # PostgreSQL's READ COMMITTED takes a new snapshot per statement; SQLite's is one anyway.
        self._snapshot = (
            self._reads
            if self.is_sqlite
            else self._reads.execution_options(isolation_level="REPEATABLE READ")
        )
        self._shares = FairShares(1 if self.is_sqlite else pool_size)
        # PostgreSQL's driver connections: one-statement writes, and reads, each their own.
        self._autocommit: AutocommitPool | None = None
        self._driver_reads: AutocommitPool | None = None
        if not self.is_sqlite:
            self._autocommit = AutocommitPool(self.dsn, half, server_settings=timeouts)
            self._driver_reads = AutocommitPool(self.dsn, half, server_settings=timeouts)
        self._sqlite_readers = (
            SqliteReaders(path, _SQLITE_READERS, SQLITE_BUSY_TIMEOUT_MS)
            if self.is_sqlite and path and not in_memory
            else None
        )
        for engine in (self.engine,) if self._reads is self.engine else (self.engine, self._reads):
            if self.is_sqlite:
                _configure_sqlite(engine)
            else:
                _replace_closed_connections(engine)

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
    async def unit_of_work(self, *, ambient: bool = True) -> AsyncIterator[UnitOfWork]:
        """One write transaction; joins the unit of work already open in this context, if any.
        `ambient=False`: a new one is not made this context's (for a framework that opens it
        in one task and closes it in another, as Litestar's dependencies may)."""
        joined = current_unit_of_work()
        if joined is not None:
            yield joined
            return
        held = self._held_here()
        if held is not None:
            yield await held.begin()
            return
        async with self._write(ambient=ambient) as uow:
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
        SQLAlchemy's pool: asyncpg in autocommit mode (a pool of its own, beside that of
        `autocommit()`), or aiosqlite in autocommit mode.

        Yields None where there is none (an in-memory SQLite database): use `read()` then.
        """
        if self._driver_reads is not None:
            async with self._driver_reads.connection() as conn:
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
        tenant = _tenant.get()
        if not self._shares.take(tenant):
            await self._shares.acquire(tenant)
        try:
            async with self.engine.connect() as conn:
                if self.is_sqlite:
                    await conn.execution_options(**{WRITE_OPTION: True})
                async with UnitOfWork.run(conn, ambient=ambient) as uow:
                    yield uow
        finally:
            self._shares.release(tenant)

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
        for pool in (self._autocommit, self._driver_reads, self._sqlite_readers):
            if pool is not None:
                await pool.close()
        await self.engine.dispose()
        if self._reads is not self.engine:
            await self._reads.dispose()


class FairShares:
    """Admission of write transactions: at most `size` at once, shared fairly among tenants.

    One tenant holds at most three quarters of the slots (of a single slot, that one), so the
    others always find some; a freed slot goes to the waiting tenant that holds fewest, among
    equals the one served least recently, and each tenant's own waiters are served in order.
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._cap = max(1, size * 3 // 4)
        self._held: dict[Hashable, int] = {}
        self._waiting: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._served: dict[Hashable, int] = {}  # tenant → turn of its latest slot
        self._turns = itertools.count()

    def take(self, tenant: Hashable) -> bool:
        """Take a slot for `tenant` if one is free and nobody waits (then pair with one
        `release(tenant)`); else False, and `acquire` waits for one."""
        if self._free and not self._waiting and self._held.get(tenant, 0) < self._cap:
            self._take(tenant)
            return True
        return False

    async def acquire(self, tenant: Hashable) -> None:
        """Wait for a slot for `tenant`; pair with one `release(tenant)`."""
        if self.take(tenant):
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(waiter)
        self._grant()
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(tenant)  # granted as it was cancelled: pass the slot on
            else:
                self._forget(tenant, waiter)
            raise

    def release(self, tenant: Hashable) -> None:
        """Give back a slot of `tenant`'s, to the next tenant in turn."""
        self._free += 1
        held = self._held[tenant] - 1
        if held:
            self._held[tenant] = held
        else:
            del self._held[tenant]
            if tenant not in self._waiting:
                self._served.pop(tenant, None)
        if self._waiting:
            self._grant()

    def _take(self, tenant: Hashable) -> None:
        self._free -= 1
        self._held[tenant] = self._held.get(tenant, 0) + 1
        self._served[tenant] = next(self._turns)

    def _grant(self) -> None:
        while self._free:
            eligible = [t for t in self._waiting if self._held.get(t, 0) < self._cap]
            if not eligible:
                return
            tenant = min(eligible, key=lambda t: (self._held.get(t, 0), self._served.get(t, -1)))
            queue = self._waiting[tenant]
            waiter = queue.popleft()
            if not queue:
                del self._waiting[tenant]
            if not waiter.done():  # a cancelled waiter forgets itself when it resumes
                self._take(tenant)
                waiter.set_result(None)

    def _forget(self, tenant: Hashable, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]
        if tenant not in self._held and tenant not in self._waiting:
            self._served.pop(tenant, None)


def _server_settings(**timeouts: float | None) -> dict[str, str]:
    """PostgreSQL settings of each new connection: the timeouts given, in milliseconds."""
    return {
        name: str(max(1, round(seconds * 1000))) for name, seconds in timeouts.items() if seconds
    }


def _replace_closed_connections(engine: AsyncEngine) -> None:
    """Never lend a pooled connection the server has closed (a restart, an idle timeout): the
    pool opens a new one instead. Costs no round trip: asyncpg knows its socket is gone."""

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if dbapi_conn.driver_connection.is_closed():
            raise DisconnectionError("the server closed this pooled connection")


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

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _run_waiting(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # A statement of SQLAlchemy's sees the unit of work's waiting writes (`later`): they
        # run first (its own BEGIN excepted: they would begin the transaction it begins).
        uow = sqlite_unit(conn)
        if uow is not None and uow.waiting and not statement.startswith("BEGIN"):
            await_only(uow.run_waiting())

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.connection.driver_connection.in_transaction:
            return  # begun on the driver (`uow.sqlite_call`)
        options = conn.get_execution_options()
        if not options.get(_AUTOCOMMIT, False):
            conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_OPTION, False) else "BEGIN")

    # The unit of work commits (or rolls back) on the driver, in one hand-off, then ends
    # SQLAlchemy's transaction with no I/O: a COMMIT or ROLLBACK with no transaction open on
    # the driver is skipped, not sent to its thread (where it would do nothing).
    dialect = engine.sync_engine.dialect
    dialect.do_commit = _if_in_transaction(dialect.do_commit)  # type: ignore[method-assign,assignment]
    dialect.do_rollback = _if_in_transaction(dialect.do_rollback)  # type: ignore[method-assign,assignment]

    @event.listens_for(engine.sync_engine, "reset")
    def _on_reset(dbapi_conn: Any, record: Any, state: PoolResetState) -> None:
        # A unit of work or read() has ended its transaction already: the pool's usual rollback
        # on return would only be one more hand-off to aiosqlite's thread.
        if state.asyncio_safe and record.driver_connection.in_transaction:
            dbapi_conn.rollback()


def _if_in_transaction(end: Callable[[Any], None]) -> Callable[[Any], None]:
    """`end(dbapi_connection)` (a dialect's `do_commit` or `do_rollback`) only when the
    aiosqlite connection under it has a transaction open (or cannot say: closed)."""

    def ended(dbapi_connection: Any) -> None:
        # A pool's proxied connection (a `Connection`'s) or the DB-API adapter itself.
        driver = getattr(dbapi_connection, "driver_connection", None)
        if driver is None:
            driver = dbapi_connection._connection
        try:
            open_ = driver.in_transaction
        except ValueError:  # aiosqlite: "no active connection"
            open_ = True
        if open_:
            end(dbapi_connection)

    return ended
