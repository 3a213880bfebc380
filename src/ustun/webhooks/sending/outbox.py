"""The transactional outbox: events and their deliveries commit with the business write.

A handler calls `emit(uow, …)` inside its unit of work. The event row and one delivery per
matching enabled endpoint are inserted on the same transaction, so a rolled-back request sends
nothing and a committed one is never lost. Dispatchers are woken after commit: by the store's
notification (PostgreSQL NOTIFY, delivered only when the transaction commits) and by the
in-process doorbell.
"""

from __future__ import annotations

from typing import Any

from ustun import clock, ids
from ustun.store import UnitOfWork
from ustun.webhooks.adapters import for_connection
from ustun.webhooks.sending import message
from ustun.webhooks.sending.wakeup import doorbell
from ustun.webhooks.states import Status

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
    store = for_connection(uow.conn)
    now = clock.now()
    event_id = ids.new_id("evt")
    targets = await store.insert_event(
        uow,
        {
            "id": event_id,
            "account_id": account_id,
            "type": event_type,
            "data": message.stored_data(data),
            "object_url": object_url,
            "created_at": now,
        },
        endpoint_id,
    )
    if not targets:
        return event_id
    await store.queue(
        uow,
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
    """Wake dispatchers once `uow` commits: the store's notification and the in-process doorbell."""
    await for_connection(uow.conn).notify(uow)
    uow.after_commit(_ring)
