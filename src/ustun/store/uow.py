"""The unit of work: one transaction that every state change goes through.

Handlers write through `uow.conn`; pillars hang work on it that must commit or roll back with
the handler's writes (idempotency completion, outbox events and deliveries, enqueued jobs) via
`before_commit`, and side effects that must only follow a commit (wake-ups) via `after_commit`.
Nested `Database.unit_of_work()` calls in the same context join the open unit of work.
Inside `Database.hold()` the first `unit_of_work()` opens the transaction and the *holder*
commits it when its block ends (the idempotency middleware completes its record there).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]

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
        self._after: list[Hook] = []

    def before_commit(self, hook: Hook) -> None:
        """Run `hook` inside the transaction, after the handler, right before COMMIT."""
        self._before.append(hook)

    def after_commit(self, hook: Hook) -> None:
        """Run `hook` once the transaction has committed (never after a rollback)."""
        self._after.append(hook)

    async def asyncpg(self) -> Any:
        """The asyncpg connection underneath (PostgreSQL only), inside this transaction.

        For hot paths that skip SQLAlchemy's statement machinery. SQLAlchemy's adapter opens the
        transaction at its first statement: if nothing ran yet, it is opened here.
        """
        raw = self.conn.sync_connection
        assert raw is not None, "a unit of work's connection is open"
        adapted: Any = raw.connection.dbapi_connection
        if adapted._transaction is None:
            await adapted._start_transaction()
        return adapted.driver_connection

    @classmethod
    @asynccontextmanager
    async def run(cls, conn: AsyncConnection, *, ambient: bool = True) -> AsyncIterator[UnitOfWork]:
        """Open a transaction on `conn`; commit if the block succeeds, roll back if it raises.

        `ambient=False` leaves the context variable alone (a held unit of work is found
        through its hold, and may be closed from another context than the one that opened it).
        """
        uow = cls(conn)
        token = _current.set(uow) if ambient else None
        try:
            async with conn.begin():
                yield uow
                for hook in uow._before:
                    await hook()
        finally:
            if token is not None:
                _current.reset(token)
        for hook in uow._after:
            try:
                await hook()
            except Exception:
                log.exception("after-commit hook failed; the transaction itself committed")
