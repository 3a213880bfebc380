"""The unit of work: one transaction that every state change goes through.

Handlers write through `uow.conn`; pillars hang work on it that must commit or roll back with
the handler's writes (idempotency completion, outbox events and deliveries) via
`before_commit`, writes that are best made last (enqueued jobs) via `at_commit`, and side
effects that must only follow a commit (wake-ups) via `after_commit`. The last before-commit
hook may end the transaction with its last statements (`run_last`: on SQLite they go to
aiosqlite's thread with the COMMIT, or a ROLLBACK, in one hand-off).
Nested `Database.unit_of_work()` calls in the same context join the open unit of work.
Inside `Database.hold()` the first `unit_of_work()` opens the transaction and the *holder*
commits it when its block ends (the idempotency middleware completes its record there).
"""

from __future__ import annotations

import contextvars
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import tracing

if TYPE_CHECKING:
    from ustun.store.plans import Plan

log = logging.getLogger(__name__)

T = TypeVar("T")
Hook = Callable[[], Awaitable[None]]
# The execution option of a SQLite connection whose transactions write (`BEGIN IMMEDIATE`).
WRITE_OPTION = "ustun_write"
# Called with `alone`: nothing else was executed in the transaction and no other such hook runs.
LastHook = Callable[[bool], Awaitable[None]]

_current: contextvars.ContextVar[UnitOfWork | None] = contextvars.ContextVar(
    "ustun_unit_of_work", default=None
)


_held: contextvars.ContextVar[Held | None] = contextvars.ContextVar("ustun_held", default=None)


def current_unit_of_work() -> UnitOfWork | None:
    """The unit of work open in this context, if any (including a held one)."""
    uow = _current.get()
    if uow is None:
        held = _held.get()
        uow = held.uow if held is not None else None
    return uow


def current_hold() -> Held | None:
    """The hold this context runs in, if any."""
    return _held.get()


class Held:
    """A unit of work opened on first use and committed by its holder, not by its user."""

    def __init__(
        self, owner: object, opener: Callable[[], AbstractAsyncContextManager[UnitOfWork]]
    ):
        self.owner = owner
        self.uow: UnitOfWork | None = None
        self._opener = opener
        self._stack = AsyncExitStack()

    async def begin(self) -> UnitOfWork:
        """The held unit of work, opened now if nothing opened it yet."""
        if self.uow is None:
            self.uow = await self._stack.enter_async_context(self._opener())
        return self.uow

    async def _finish(self, exc: BaseException | None) -> None:
        if exc is None:
            await self._stack.aclose()
        else:
            await self._stack.__aexit__(type(exc), exc, exc.__traceback__)

    @classmethod
    @asynccontextmanager
    async def run(
        cls, owner: object, opener: Callable[[], AbstractAsyncContextManager[UnitOfWork]]
    ) -> AsyncIterator[Held]:
        """Hold in this block: commit at its end if it succeeds, roll back if it raises."""
        held = cls(owner, opener)
        token = _held.set(held)
        try:
            yield held
        except BaseException as exc:
            await held._finish(exc)
            raise
        else:
            await held._finish(None)
        finally:
            _held.reset(token)


class UnitOfWork:
    """A transaction in progress plus the hooks to run just before and just after commit."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self._before: list[Hook] = []
        self._last: list[LastHook] = []
        self._after: list[Hook] = []
        # SQLite: whether a driver statement began the transaction (`sqlite_call`).
        self._touched = False
        # Which before-commit hook runs (its index), while they run.
        self._hook_at: int | None = None
        # Set once `run_last` has ended the transaction: True committed, False rolled back.
        self._ended: bool | None = None
        # SQLite: writes waiting for the next hand-off to aiosqlite's thread (`later`).
        self._later: list[Later] = []

    def before_commit(self, hook: Hook) -> None:
        """Run `hook` inside the transaction, after the handler, right before COMMIT."""
        self._before.append(hook)

    def at_commit(self, hook: LastHook) -> None:
        """Run `hook(alone)` after every `before_commit` hook, as the transaction's last work.

        When `alone`, the hook may run its ONE statement as its own transaction (PostgreSQL:
        one round trip instead of BEGIN, statement, COMMIT): nothing else would commit with it.
        """
        self._last.append(hook)

    def after_commit(self, hook: Hook) -> None:
        """Run `hook` once the transaction has committed (never after a rollback)."""
        self._after.append(hook)

    async def later(self, plan: Plan[T], then: Callable[[T], None]) -> None:
        """Run `plan` (`store.plans`), writes whose result nothing in the transaction reads, and
        hand its result to `then` once it has run.

        On SQLite the plan waits in the unit of work and runs on aiosqlite's thread in the
        hand-off of the transaction's next statement, or of its COMMIT (a SQLAlchemy statement
        runs what waits first): one hand-off fewer per such write, and the write lock held for
        the work, not for the event loop's turns. A rollback drops it unrun. Elsewhere
        (PostgreSQL, after `run_last`) it runs now.
        """
        if self.conn.dialect.name != "sqlite" or self._ended is not None:
            from ustun.store.plans import run

            then(await run(plan, self.conn))
            return
        self._later.append((plan, then))

    def _take_later(self) -> list[Later]:
        waiting, self._later = self._later, []
        return waiting

    async def run_last(self, plan: Plan[T], *, commit_if: Callable[[T], bool]) -> T:
        """Run `plan` (`store.plans`) as the transaction's last statements, then end it: the
        plan's result, and the transaction commits if `commit_if(result)`, else rolls back
        (then the caller must raise, as it would to have a plain unit of work roll back).

        On SQLite, from the unit of work's last before-commit hook (and no `at_commit` hook
        queued), the plan runs on aiosqlite's thread followed by COMMIT (or ROLLBACK) in ONE
        hand-off; nothing may run in the unit of work after it (a statement that does is
        rolled back, and the unit of work raises). Anywhere else (PostgreSQL, a hook with
        others after it, the handler) it runs as `plans.run` does, and the unit of work
        commits or rolls back as usual. Plans are pure (`plans.run_sync` runs them on a
        host framework's threads too): running one on aiosqlite's thread changes nothing.
        """
        from ustun.store.plans import run

        at = self._hook_at
        conn = self.conn
        last = at is not None and at == len(self._before) - 1 and not self._last
        if not last or self._ended is not None or conn.dialect.name != "sqlite":
            return await run(plan, conn)
        self._touched = True
        result, committed = await sqlite_call(conn, _run_then_end, plan, commit_if)
        self._ended = committed
        if conn.in_transaction():  # end SQLAlchemy's view of it too (no I/O: see `_began`)
            sync = conn.sync_connection
            assert sync is not None
            if committed:
                sync.commit()
            else:
                sync.rollback()
        return result  # type: ignore[no-any-return]

    @classmethod
    @asynccontextmanager
    async def run(cls, conn: AsyncConnection, *, ambient: bool = True) -> AsyncIterator[UnitOfWork]:
        """Open a transaction on `conn`; commit if the block succeeds, roll back if it raises.

        `ambient=False` leaves the context variable alone (a held unit of work is found
        through its hold, and may be closed from another context than the one that opened it).
        """
        uow = cls(conn)
        token = _current.set(uow) if ambient else None
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            _sqlite_units[conn.sync_connection] = uow
        # The transaction begins at the first statement (SQLite: `BEGIN IMMEDIATE`, in the same
        # hand-off as a driver statement, or from the engine's begin event for SQLAlchemy's);
        # one that executed nothing has nothing to commit.
        try:
            with tracing.span("ustun.unit_of_work", current=ambient):
                try:
                    yield uow
                    for at, hook in enumerate(uow._before):
                        uow._hook_at = at
                        await hook()
                    uow._hook_at = None
                    alone = len(uow._last) == 1 and not _begun(conn)
                    for last in uow._last:
                        await last(alone)
                except BaseException:
                    if sqlite:
                        await uow._abandon_sqlite()
                    elif conn.in_transaction():
                        await _roll_back(conn)
                    raise
                if uow._ended is not None:
                    await uow._after_run_last()
                elif sqlite and (uow._later or conn.in_transaction()):
                    await uow._commit_sqlite()
                elif conn.in_transaction():
                    await _commit_asyncpg(conn)
        finally:
            if sqlite:
                del _sqlite_units[conn.sync_connection]
            if token is not None:
                _current.reset(token)
        for hook in uow._after:
            try:
                await hook()
            except Exception:
                log.exception("after-commit hook failed; the transaction itself committed")

    async def _commit_sqlite(self) -> None:
        """The writes waiting (`later`) and COMMIT in one hand-off on the driver (SQLAlchemy's
        `commit()` adds a greenlet), then end SQLAlchemy's transaction: the engine's
        `do_commit` does nothing once the driver's is over."""
        conn = self.conn
        if self._later or _adapted(conn).driver_connection.in_transaction:
            try:
                await sqlite_call(conn, _commit_raw, begin=False)
            except BaseException:
                await self._abandon_sqlite()  # a waiting write failed: none of it stays
                raise
        if conn.in_transaction():
            conn.sync_connection.commit()  # type: ignore[union-attr]

    @property
    def waiting(self) -> bool:
        """Whether writes wait to run (`later`)."""
        return bool(self._later)

    async def run_waiting(self) -> None:
        """Run the writes waiting (`later`) now, in one hand-off: before a SQLAlchemy
        statement, which must see them (`engine._configure_sqlite`)."""
        if self._later:
            await sqlite_call(self.conn, _nothing, begin=False)

    async def _after_run_last(self) -> None:
        """The unit of work's end once `run_last` ended its transaction: refuse a transaction
        begun after that (rolled back), and one that `run_last` rolled back."""
        if self.conn.in_transaction():
            await self._abandon_sqlite()
            raise RuntimeError("a statement ran in the unit of work after its run_last")
        if not self._ended:
            raise RuntimeError("run_last rolled the unit of work back, and its caller went on")

    async def _abandon_sqlite(self) -> None:
        """Roll back after a failure: the driver's transaction, then SQLAlchemy's (no I/O)."""
        conn = self.conn
        self._later.clear()  # never run: nothing of them was written
        if not (self._touched or conn.in_transaction()):
            return  # a read-only unit of work that executed nothing
        if self._ended is not None and not conn.in_transaction():
            return  # `run_last` ended it, and nothing ran after
        # Unconditionally (no look at `in_transaction` first): a driver statement cancelled
        # while queued on aiosqlite's thread still runs there (BEGIN and all), before this.
        try:
            await _on_sqlite_thread(conn, _rollback_raw)
        except Exception:
            await conn.invalidate()
            return
        if conn.in_transaction():
            conn.sync_connection.rollback()  # type: ignore[union-attr]


async def _commit_asyncpg(conn: AsyncConnection) -> None:
    """COMMIT on asyncpg (SQLAlchemy's `commit()` adds a greenlet), then end SQLAlchemy's
    transaction: its adapter's `commit` does nothing once asyncpg's transaction is over."""
    adapted = _adapted(conn)
    if adapted._transaction is not None:
        # As the adapter's own commit: the transaction is done whether COMMIT succeeds or not.
        await adapted._call_and_discard(adapted._transaction.commit)
    conn.sync_connection.commit()  # type: ignore[union-attr]


async def _roll_back(conn: AsyncConnection) -> None:
    """Roll back after a failure. A connection that cannot (lost mid-transaction, the server
    shutting down) is invalidated, so the pool never lends it again, and the failure that
    caused the rollback is the one raised."""
    try:
        await conn.rollback()
    except Exception:
        await conn.invalidate()


def _adapted(conn: AsyncConnection) -> Any:
    """SQLAlchemy's adapter around the DB-API connection under `conn` (open)."""
    sync = conn.sync_connection
    assert sync is not None, "the connection is open"
    return sync.connection.dbapi_connection


def _begun(conn: AsyncConnection) -> bool:
    """Whether the database has seen the transaction's BEGIN (asyncpg: at the first statement)."""
    return conn.dialect.driver != "asyncpg" or _adapted(conn)._transaction is not None


# The units of work open on SQLite, by their SQLAlchemy (sync) connection: `sqlite_call` marks
# them touched and runs their waiting writes, as the engine does before its own statements.
_sqlite_units: dict[Any, UnitOfWork] = {}


def sqlite_unit(sync_connection: Any) -> UnitOfWork | None:
    """The unit of work open on a SQLite connection (SQLAlchemy's sync one), if any."""
    return _sqlite_units.get(sync_connection)


async def sqlite_call(
    conn: AsyncConnection, work: Callable[..., T], *args: Any, begin: bool = True
) -> T:
    """`work(raw, *args)` on aiosqlite's thread, `raw` its `sqlite3.Connection`: ONE hand-off.

    With `begin`, a transaction is started in that same hand-off if none is open (`BEGIN
    IMMEDIATE` on a connection with `WRITE_OPTION`), and SQLAlchemy's connection is told, so
    it commits or rolls back as usual and its own statements later join the transaction. The
    unit of work's waiting writes (`later`) run first, in the same hand-off (beginning the
    transaction, whatever `begin` says).
    """
    uow = _sqlite_units.get(conn.sync_connection)
    waiting = uow._take_later() if uow is not None else []
    start = None
    if (begin or waiting) and not conn.in_transaction():
        start = _sqlite_begin(conn)
        if uow is not None:
            uow._touched = True
    driver = _adapted(conn).driver_connection
    try:
        found: tuple[T, list[Any]] = await _on_thread(
            driver, _begun_then, driver._conn, start, waiting, work, args
        )
    finally:
        # Even if the work failed: the transaction is open, and must be rolled back.
        if start is not None and driver.in_transaction and not conn.in_transaction():
            _began(conn)
    _then(waiting, found[1])
    return found[0]


async def _on_sqlite_thread(conn: AsyncConnection, fn: Callable[..., T], *args: Any) -> T:
    """`fn(raw, *args)` on the aiosqlite thread of `conn`, `raw` its `sqlite3.Connection`."""
    driver = _adapted(conn).driver_connection
    return await _on_thread(driver, fn, driver._conn, *args)


async def _on_thread(driver: Any, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the thread of aiosqlite connection `driver`, in one hand-off.

    `Connection._execute` (and `_conn`, the `sqlite3.Connection`) are private to aiosqlite
    (checked against 0.22: `_execute(fn, *args)` queues `partial(fn, *args)` for the thread,
    which runs queued calls one at a time, in order, and resolves the future it awaits).
    """
    return await driver._execute(fn, *args)  # type: ignore[no-any-return]


def _began(conn: AsyncConnection) -> None:
    """Tell SQLAlchemy's connection the driver begins a transaction: no I/O, no greenlet
    (SQLite: the engine's begin event sees the driver in a transaction and leaves it be;
    PostgreSQL: the dialect's `do_begin` does nothing, asyncpg's BEGIN is the adapter's)."""
    conn.sync_connection.begin()  # type: ignore[union-attr]


# A write waiting in a unit of work (`UnitOfWork.later`): its plan, and what takes its result.
Later = tuple["Plan[Any]", Callable[[Any], None]]


def _begun_then(
    raw: sqlite3.Connection,
    start: str | None,
    waiting: list[Later],
    work: Callable[..., T],
    args: tuple[Any, ...],
) -> tuple[T, list[Any]]:
    """On aiosqlite's thread: `start` the transaction unless one is open, run the writes
    waiting, then the work; its result and theirs."""
    if start is not None and not raw.in_transaction:
        raw.execute(start)
    done = [_run_plan(plan, raw) for plan, _ in waiting]
    return work(raw, *args), done


def _run_plan(plan: Plan[T], raw: sqlite3.Connection) -> T:
    """Run a plan on aiosqlite's thread, on its `sqlite3.Connection`, in the transaction it
    has open: plans are pure (`plans.run_sync` runs them on a host framework's threads too)."""
    from ustun.store.dbapi import DbapiConnection
    from ustun.store.plans import run_sync

    return run_sync(plan, DbapiConnection(raw, "sqlite"))


def _then(waiting: list[Later], done: list[Any]) -> None:
    """Hand each waiting write's result to its taker, back on the event loop."""
    for (_, then), result in zip(waiting, done, strict=True):
        then(result)


def _run_then_end(
    raw: sqlite3.Connection, plan: Plan[T], commit_if: Callable[[T], bool]
) -> tuple[T, bool]:
    """On aiosqlite's thread, in the transaction `_begun_then` began: run the plan, then
    COMMIT if `commit_if` its result, else ROLLBACK. Returns the result and whether it
    committed. A failure leaves the transaction open, for the unit of work to roll back."""
    result = _run_plan(plan, raw)
    if commit_if(result):
        raw.commit()
        return result, True
    raw.rollback()
    return result, False


def _commit_raw(raw: sqlite3.Connection) -> None:
    raw.commit()


def _nothing(raw: sqlite3.Connection) -> None:
    return None


def _rollback_raw(raw: sqlite3.Connection) -> None:
    raw.rollback()  # a no-op when no transaction is open


def _sqlite_begin(conn: AsyncConnection) -> str:
    """How a transaction on `conn` starts: `BEGIN IMMEDIATE` where it writes."""
    sync = conn.sync_connection
    write = sync is not None and sync.get_execution_options().get(WRITE_OPTION, False)
    return "BEGIN IMMEDIATE" if write else "BEGIN"


async def asyncpg_connection(conn: AsyncConnection, *, begin: bool = True) -> Any:
    """The asyncpg connection under `conn`, for hot paths that skip SQLAlchemy's statements.

    With `begin`, the unit of work's transaction is started first if no statement started it
    (SQLAlchemy's adapter BEGINs lazily); SQLAlchemy then commits or rolls it back as usual.
    """
    adapted = _adapted(conn)
    if begin:
        if not conn.in_transaction():
            _began(conn)  # no I/O: the adapter BEGINs on asyncpg, just below
        if adapted._transaction is None:
            await adapted._start_transaction()
    return adapted.driver_connection
