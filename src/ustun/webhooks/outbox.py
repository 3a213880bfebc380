"""The transactional outbox: events and their deliveries commit with the business write.

A handler calls `emit(uow, …)` inside its unit of work. The event row and one delivery per
matching enabled endpoint are inserted on the same transaction, so a rolled-back request sends
nothing and a committed one is never lost. Dispatchers are woken after commit: by NOTIFY on
PostgreSQL (delivered only when the transaction commits) and by the in-process doorbell.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import insert, select, text

from ustun import clock, ids
from ustun.store import UnitOfWork
from ustun.webhooks import message
from ustun.webhooks.patterns import matches
from ustun.webhooks.states import Status
from ustun.webhooks.tables import deliveries, endpoints, events
from ustun.webhooks.wakeup import CHANNEL, doorbell

PING = "ping"
ENDPOINT_DISABLED = "endpoint.disabled"


async def _ring() -> None:
    doorbell.ring()


async def emit(
    uow: UnitOfWork,
    account_id: str,
    event_type: str,
    data: dict[str, Any],
    *,
    object_url: str | None = None,
    endpoint_id: str | None = None,
) -> str:
    """Record `event_type` with `data` and queue its deliveries; return the event id.

    `endpoint_id` sends it to that one endpoint regardless of its filter (the `ping` test).
    """
    now = clock.now()
    event_id = ids.new_id("evt")
    conn = uow.conn
    await conn.execute(
        insert(events).values(
            id=event_id,
            account_id=account_id,
            type=event_type,
            data=message.stored_data(data),
            object_url=object_url,
            created_at=now,
        )
    )
    query = select(endpoints.c.id, endpoints.c.events).where(
        endpoints.c.account_id == account_id, endpoints.c.enabled.is_(True)
    )
    if endpoint_id is not None:
        query = query.where(endpoints.c.id == endpoint_id)
    targets = [
        row.id
        for row in await conn.execute(query)
        if endpoint_id is not None or matches(json.loads(row.events), event_type)
    ]
    if not targets:
        return event_id
    await conn.execute(
        insert(deliveries),
        [
            {
                "id": ids.new_id("dlv"),
                "account_id": account_id,
                "endpoint_id": target,
                "event_id": event_id,
                "status": Status.PENDING,
                "attempt_count": 0,
                "next_attempt_at": now,
                "created_at": now,
                "updated_at": now,
            }
            for target in targets
        ],
    )
    await wake(uow)
    return event_id


async def wake(uow: UnitOfWork) -> None:
    """Wake dispatchers once `uow` commits: NOTIFY (PostgreSQL) and the in-process doorbell."""
    if uow.conn.dialect.name == "postgresql":
        await uow.conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
    uow.after_commit(_ring)
