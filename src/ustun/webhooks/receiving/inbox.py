"""Receiver inboxes: remember each `webhook-id` so its handler runs once.

`claim` is the deduplication point: the first delivery of an id claims it; duplicates do not.
An id whose handler never finished (the process died, or every retry failed) may be claimed
again once `lease` has passed, so a sender's redelivery is not silently dropped. `handled` tells
an id whose handler finished from one still held (claimed less than `lease` ago, perhaps by a
process that died mid-handler), which a broker consumer must not acknowledge as a duplicate.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Protocol

from ustun import clock
from ustun.defaults import DEFAULT_INBOX_LEASE
from ustun.store import Database
from ustun.store.migrate import RequiredTables
from ustun.webhooks.adapters import for_database
from ustun.webhooks.tables import inbox


class Inbox(Protocol):
    """Where a receiver records the ids it has seen."""

    # Seconds after a claim when the id, if its handler has not finished, may be claimed again.
    lease: float

    async def prepare(self) -> None:
        """Make the inbox ready (its table exists); the receiver runs it once, first."""
        ...

    async def claim(self, webhook_id: str, event_type: str) -> bool:
        """True when this delivery should run the handler (first time, or a stale failure)."""
        ...

    async def done(self, webhook_id: str) -> None:
        """The handler finished."""
        ...

    async def handled(self, webhook_id: str) -> bool:
        """True when the handler finished for this id (`done`), not merely claimed."""
        ...

    async def failed(self, webhook_id: str, error: str) -> None:
        """The handler gave up; a redelivery after the lease may claim it again."""
        ...


class MemoryInbox:
    """An inbox in this process's memory (for `ustun listen` and tests)."""

    def __init__(self, lease: float = DEFAULT_INBOX_LEASE) -> None:
        self.lease = lease
        self._claimed: dict[str, float] = {}
        self._done: set[str] = set()

    async def prepare(self) -> None:
        return None

    async def claim(self, webhook_id: str, event_type: str) -> bool:
        now = time.monotonic()
        since = self._claimed.get(webhook_id)
        if webhook_id in self._done or (since is not None and now - since < self.lease):
            return False
        self._claimed[webhook_id] = now
        return True

    async def done(self, webhook_id: str) -> None:
        self._done.add(webhook_id)

    async def handled(self, webhook_id: str) -> bool:
        return webhook_id in self._done

    async def failed(self, webhook_id: str, error: str) -> None:
        return None


class DatabaseInbox:
    """An inbox table (`webhook_inbox`, UNIQUE on the id) on SQLite or PostgreSQL.

    `create_tables` (default: on SQLite only) lets `prepare` migrate a database that lacks it.
    """

    def __init__(
        self, db: Database, lease: float = DEFAULT_INBOX_LEASE, *, create_tables: bool | None = None
    ) -> None:
        self.db = db
        self.lease = lease
        self._tables = RequiredTables(db, inbox.name, create=create_tables)
        self._store = for_database(db)

    async def prepare(self) -> None:
        """Create the table or raise `TablesMissing` with the command to run."""
        await self._tables.ensure()

    async def claim(self, webhook_id: str, event_type: str) -> bool:
        now = clock.now()
        async with self.db.unit_of_work() as uow:
            return await self._store.claim_inbox(
                uow, webhook_id, event_type, now=now, stale=now - timedelta(seconds=self.lease)
            )

    async def done(self, webhook_id: str) -> None:
        async with self.db.unit_of_work() as uow:
            await self._store.inbox_done(uow, webhook_id, clock.now())

    async def handled(self, webhook_id: str) -> bool:
        """One read by the primary key, outside any write transaction."""
        async with self.db.read() as conn:
            return await self._store.inbox_handled(conn, webhook_id)

    async def failed(self, webhook_id: str, error: str) -> None:
        async with self.db.unit_of_work() as uow:
            await self._store.inbox_failed(uow, webhook_id, error)
