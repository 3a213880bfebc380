"""The transactional outbox: events and their deliveries commit with the business write.

A handler calls `emit(uow, …)` inside its unit of work. The event row and one delivery per
matching enabled endpoint are inserted on the same transaction, so a rolled-back request sends
nothing and a committed one is never lost. Dispatchers are woken after commit: by the store's
notification (PostgreSQL NOTIFY, delivered only when the transaction commits) and by the
in-process doorbell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ustun import clock, ids, tracing
from ustun.store import UnitOfWork
from ustun.store.accounts import account_id as named_account
from ustun.store.dbapi import DbapiConnection
from ustun.store.plans import run_sync
from ustun.webhooks import catalog
from ustun.webhooks.adapters import for_connection, notifies
from ustun.webhooks.adapters import plans as webhook_plans
from ustun.webhooks.operational import OPERATIONAL
from ustun.webhooks.sending import message
from ustun.webhooks.sending.wakeup import doorbell

PING = "ping"
# The events ustun itself emits.
OWN_TYPES = OPERATIONAL | {PING}
# The span of an emit (`ustun.tracing`) and its attributes.
EMIT_SPAN = "ustun.webhook.emit"
EVENT_ID = "ustun.event.id"
EVENT_TYPE = "ustun.event.type"


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
    A `strict` event catalogue refuses (422) a type it lacks or data its schema refuses.
    """
    _check(event_type, data)
    with tracing.span(EMIT_SPAN, attributes={EVENT_TYPE: event_type}) as span:
        event = new_event(account_id, event_type, data, object_url=object_url)
        if span is not None:
            span.set_attribute(EVENT_ID, event["id"])
        await for_connection(uow.conn).emit(uow, event, endpoint_id, _ring_if_sent(uow))
    return str(event["id"])


def _ring_if_sent(uow: UnitOfWork) -> Callable[[list[str]], None]:
    """Ring the in-process doorbell after `uow` commits, if the event got deliveries."""

    def then(deliveries: list[str]) -> None:
        if deliveries:
            uow.after_commit(_ring)

    return then


def _check(event_type: str, data: dict[str, Any]) -> None:
    """A strict catalogue's check of an app's event. ustun's own (`ping`, the operational
    events) are shaped by ustun, not the app's catalogue: the dispatcher's dead letters and an
    endpoint's test must not fail because the app's catalogue does not list them."""
    if catalog.active.strict and event_type not in OWN_TYPES:
        catalog.active.check(event_type, data)


def emit_on(conn: DbapiConnection, event_type: str, data: dict[str, Any], *, account: str) -> str:
    """`emit` on a host framework's synchronous connection, in the transaction it has open (the
    deliveries are sent only if it commits), for the account named `account` (made on first
    use); the event's id. A `strict` event catalogue refuses (422) what `emit` refuses."""
    _check(event_type, data)
    with tracing.span(EMIT_SPAN, attributes={EVENT_TYPE: event_type}) as span:
        event = new_event(run_sync(named_account(account), conn), event_type, data)
        if span is not None:
            span.set_attribute(EVENT_ID, event["id"])
        run_sync(webhook_plans.emit(event, None, notify=notifies(conn)), conn)
    return str(event["id"])


def new_event(
    account_id: str, event_type: str, data: dict[str, Any], *, object_url: str | None = None
) -> dict[str, Any]:
    """The row of a new event of `account_id` (`ustun.webhooks.adapters.plans.emit` writes it
    on any connection); its deliveries' attempts join the current span's trace."""
    return {
        "id": ids.new_id("evt"),
        "account_id": account_id,
        "type": event_type,
        "data": message.stored_data(data),
        "object_url": object_url,
        "created_at": clock.now(),
        "traceparent": tracing.current_traceparent(),
    }


async def wake(uow: UnitOfWork) -> None:
    """Wake dispatchers once `uow` commits: the store's notification and the in-process doorbell."""
    await for_connection(uow.conn).notify(uow)
    uow.after_commit(_ring)
