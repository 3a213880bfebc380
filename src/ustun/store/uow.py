"""The unit of work: one transaction that every state change goes through.

Handlers write through `uow.conn`; pillars hang work on it that must commit or roll back with
the handler's writes (idempotency completion, outbox events and deliveries, enqueued jobs) via
`before_commit`, and side effects that must only follow a commit (wake-ups) via `after_commit`.
Nested `Database.unit_of_work()` calls in the same context join the open unit of work.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]

_current: contextvars.ContextVar[UnitOfWork | None] = contextvars.ContextVar(
    "ustun_unit_of_work", default=None
)


def current_unit_of_work() -> UnitOfWork | None:
    """The unit of work open in this context, if any."""
    return _current.get()


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

    @classmethod
    @asynccontextmanager
    async def run(cls, conn: AsyncConnection) -> AsyncIterator[UnitOfWork]:
        """Open a transaction on `conn`; commit if the block succeeds, roll back if it raises."""
        uow = cls(conn)
        token = _current.set(uow)
        try:
            async with conn.begin():
                yield uow
                for hook in uow._before:
                    await hook()
        finally:
            _current.reset(token)
        for hook in uow._after:
            try:
                await hook()
            except Exception:
                log.exception("after-commit hook failed; the transaction itself committed")
