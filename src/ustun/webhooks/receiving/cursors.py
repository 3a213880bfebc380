"""Where a receiver's `Reconciler` is in each provider's event feed, kept beside its inbox.

The cursor is saved after the events before it were handled (or found in the inbox), so a
reconciler that stops anywhere resumes without missing one; the inbox keeps the few it
re-reads from running twice.
"""

from __future__ import annotations

from typing import Protocol

from ustun import clock
from ustun.store import Database
from ustun.store.migrate import RequiredTables
from ustun.webhooks.adapters import for_database
from ustun.webhooks.receiving.inbox import DatabaseInbox, Inbox
from ustun.webhooks.tables import reconcile_cursors


class CursorStore(Protocol):
    """The last `next_cursor` of each feed (`source`) a reconciler has finished."""

    async def prepare(self) -> None:
        """Make the store ready (its table exists)."""
        ...

    async def load(self, source: str) -> str | None:
        """The saved cursor, or None before the first page."""
        ...

    async def save(self, source: str, cursor: str) -> None:
        """Remember `cursor`: every event before it has been handled."""
        ...


class MemoryCursors:
    """Cursors in this process's memory (with a `MemoryInbox`: both forget on restart)."""

    def __init__(self) -> None:
        self._cursors: dict[str, str] = {}

    async def prepare(self) -> None:
        return None

    async def load(self, source: str) -> str | None:
        return self._cursors.get(source)

    async def save(self, source: str, cursor: str) -> None:
        self._cursors[source] = cursor


class DatabaseCursors:
    """The table `webhook_reconcile_cursors` on SQLite or PostgreSQL (made by migration 0010)."""

    def __init__(self, db: Database, *, create_tables: bool | None = None) -> None:
        self.db = db
        self._tables = RequiredTables(db, reconcile_cursors.name, create=create_tables)
        self._store = for_database(db)

    async def prepare(self) -> None:
        """Create the table (SQLite) or raise `TablesMissing` with the command to run."""
        await self._tables.ensure()

    async def load(self, source: str) -> str | None:
        async with self.db.read() as conn:
            return await self._store.reconcile_cursor(conn, source)

    async def save(self, source: str, cursor: str) -> None:
        async with self.db.unit_of_work() as uow:
            await self._store.save_reconcile_cursor(uow, source, cursor, clock.now())


def cursors_beside(inbox: Inbox) -> CursorStore:
    """The cursor store next to `inbox`: its database's table, or memory."""
    if isinstance(inbox, DatabaseInbox):
        return DatabaseCursors(inbox.db)
    return MemoryCursors()
