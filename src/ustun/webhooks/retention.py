"""Payload retention: an event's payload and its attempts' response bodies are expunged once
older than the retention period (`USTUN_WEBHOOK_PAYLOAD_RETENTION`, 30 days), or at once on
request (`POST /v1/events/{id}/expunge`).

What an event was stays: its id, type, times, its deliveries' statuses and every attempt's
time, status code, latency and error. Its `data` becomes JSON `null` and `expunged_at` says
when. An expunged event is never sent again: its deliveries still due give up (dead, with an
attempt recording `EXPUNGED_REASON`), a retry is a 409 `event-expunged`, "recover" and the
frameworks' retries leave them alone, and a dispatcher that claims one anyway records it dead
unsent. The sweeper expunges in short batches, one transaction each, like the other sweepers.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from ustun import clock, ids
from ustun.defaults import DEFAULT_WEBHOOK_SWEEP_INTERVAL
from ustun.errors import ProblemError
from ustun.loops import Loop, every
from ustun.store import Database
from ustun.webhooks.adapters import for_connection, for_database
from ustun.webhooks.records import Event
from ustun.webhooks.store import Attempt

log = logging.getLogger("ustun.webhooks")

# Events one sweep transaction expunges.
EXPUNGE_BATCH = 200
# The error recorded on a delivery given up because its event's payload was expunged.
EXPUNGED_REASON = "not sent: the event's payload was expunged"


def not_sent(delivery_id: str, at: datetime) -> Attempt:
    """The attempt that records a delivery given up unsent, its event expunged."""
    return Attempt(ids.new_id("att"), delivery_id, at, None, 0.0, EXPUNGED_REASON, None)


def refuse_expunged(event: Event) -> None:
    """Raise 409 `event-expunged` if the event's payload was expunged: nothing is left to send."""
    if event.expunged_at is not None:
        raise ProblemError(
            "event-expunged",
            f"Event {event.id}'s payload was expunged at {clock.rfc3339(event.expunged_at)}: "
            "there is nothing left to send.",
        )


async def expunge_event(db: Database, account_id: str, event_id: str) -> Event:
    """Expunge one event of the account now (again: nothing changes); the event row after.
    404 `not-found` when the account has no such event."""
    async with db.unit_of_work() as uow:
        store = for_connection(uow.conn)
        if await store.account_event(uow.conn, account_id, event_id) is None:
            raise ProblemError("not-found", f"No event {event_id}.")
        await store.expunge(uow, [event_id], clock.now(), EXPUNGED_REASON)
        found = await store.account_event(uow.conn, account_id, event_id)
    assert found is not None
    return found


async def sweep(db: Database, *, retention: float, now: datetime | None = None) -> int:
    """Expunge every event created more than `retention` seconds before `now` (the clock's by
    default), `EXPUNGE_BATCH` per transaction; how many."""
    store = for_database(db)
    moment = now if now is not None else clock.now()
    before = moment - timedelta(seconds=retention)
    total = 0
    while True:
        async with db.unit_of_work() as uow:
            batch = await store.unexpunged_before(uow.conn, before, EXPUNGE_BATCH)
            total += len(await store.expunge(uow, batch, moment, EXPUNGED_REASON))
        if len(batch) < EXPUNGE_BATCH:
            return total


def sweeper(
    db: Database, *, retention: float, interval: float = DEFAULT_WEBHOOK_SWEEP_INTERVAL
) -> Loop:
    """A worker loop that expunges the payloads older than `retention` seconds every
    `interval` seconds until stopped."""

    async def once() -> None:
        expunged = await sweep(db, retention=retention)
        if expunged:
            log.info("expunged the payloads of %d events past their retention", expunged)

    return every(interval, once)
