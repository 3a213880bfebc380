"""The webhooks store on SQLite: the claim and the settling of outcomes in SQLAlchemy Core.

SQLite has no row locks: the claim runs inside `BEGIN IMMEDIATE`, which serialises writers, and
reads what sending needs in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from sqlalchemy import (
    Boolean,
    ColumnElement,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.store import Database, UnitOfWork
from ustun.webhooks.adapters.common import INSERT_EVENT, SCAN_FACTOR, SqlStore, emit_statement
from ustun.webhooks.store import CLAIM_ROUNDS, Attempt, Claim, Settlement
from ustun.webhooks.tables import DUE_PREDICATE, attempts, deliveries, endpoints, events

# The columns of a `Claim`, in order, read after the claim.
_COLUMNS = (
    deliveries.c.id,
    deliveries.c.endpoint_id,
    deliveries.c.event_id,
    deliveries.c.attempt_count,
    deliveries.c.status,
    events.c.type,
    events.c.data,
    events.c.created_at,
    events.c.object_url,
    endpoints.c.version,
    endpoints.c.failing_since.is_not(None),
)
# Bind names of a `Settlement` (`id` and the others would clash with the columns' own).
_UPDATE_KEYS = ("b_id", "b_status", "b_attempts", "b_next")


class SqliteStore(SqlStore):
    """`WebhookStore` on SQLite (aiosqlite)."""

    _emit = emit_statement(
        INSERT_EVENT.format(
            agg="group_concat(ep.id, ' ')",
            patterns="SELECT 1 FROM json_each(ep.events) AS p",
            p="p.value",
        )
    )

    async def notify(self, uow: UnitOfWork) -> None:
        """Nothing: SQLite has no other process to notify (the in-process doorbell does it)."""

    async def feed_horizon(self, conn: AsyncConnection) -> tuple[int, int]:
        """The newest committed event: writers take turns, so `seq` is commit-ordered."""
        largest = await conn.scalar(select(func.coalesce(func.max(events.c.seq), 0)))
        return 0, int(largest or 0)

    def listener(self, db: Database, notified: Callable[[], None]) -> None:
        """None: other processes are heard of by polling."""

    async def claim(
        self,
        db: Database,
        *,
        limit: int,
        now: datetime,
        lease_until: datetime,
        token: str,
        saturated: Collection[str] = (),
    ) -> list[Claim]:
        """The claim (serialised by `BEGIN IMMEDIATE`), then the details, in one transaction."""
        d = deliveries
        conditions: list[ColumnElement[bool]] = [
            literal_column(f"{d.name}.{DUE_PREDICATE}", Boolean()),
            d.c.next_attempt_at <= now,
        ]
        if saturated:
            conditions.append(d.c.endpoint_id.not_in(list(saturated)))
        due = (
            select(d.c.id, d.c.endpoint_id, d.c.next_attempt_at)
            .where(*conditions)
            .order_by(d.c.next_attempt_at)
            .limit(limit * SCAN_FACTOR)
            .subquery("due")
        )
        ranked = (
            select(
                due.c.id,
                due.c.next_attempt_at,
                func.row_number()
                .over(partition_by=due.c.endpoint_id, order_by=due.c.next_attempt_at)
                .label("rank"),
                endpoints.c.max_in_flight,
            )
            .join(endpoints, endpoints.c.id == due.c.endpoint_id)
            .subquery("ranked")
        )
        chosen = (
            select(ranked.c.id)
            .where(ranked.c.rank <= ranked.c.max_in_flight * CLAIM_ROUNDS)
            .order_by(ranked.c.next_attempt_at)
            .limit(limit)
        )
        statement = (
            update(d)
            .where(d.c.id.in_(chosen))
            .values(next_attempt_at=lease_until, lease_token=token)
            .returning(d.c.id)
        )
        async with db.unit_of_work() as uow:
            claimed = (await uow.conn.scalars(statement)).all()
            if not claimed:
                return []
            details = (
                select(*_COLUMNS)
                .join(events, events.c.id == d.c.event_id)
                .join(endpoints, endpoints.c.id == d.c.endpoint_id)
                .where(d.c.id.in_(claimed))
            )
            rows = (await uow.conn.execute(details)).all()
        return [Claim(*row) for row in rows]

    async def settle(
        self,
        uow: UnitOfWork,
        settled: Sequence[Settlement],
        attempts_made: Sequence[Attempt],
        *,
        now: datetime,
        token: str,
    ) -> None:
        """The fenced delivery updates and the attempt rows, through SQLAlchemy Core."""
        d = deliveries
        statement = (
            update(d)
            .where(d.c.id == bindparam("b_id"), d.c.lease_token == token)
            .values(
                status=bindparam("b_status"),
                attempt_count=bindparam("b_attempts"),
                next_attempt_at=bindparam("b_next"),
                lease_token=None,
                updated_at=now,
            )
        )
        await uow.conn.execute(
            statement, [dict(zip(_UPDATE_KEYS, r, strict=True)) for r in settled]
        )
        if attempts_made:
            await uow.conn.execute(insert(attempts), [r._asdict() for r in attempts_made])
