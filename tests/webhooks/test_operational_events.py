"""Operational events (`endpoint.disabled`, `endpoint.enabled`, `endpoint.recovered`,
`message.attempt.exhausted`) sent through the outbox and a running dispatcher to real local
receivers, on SQLite and PostgreSQL: who gets them, what they carry, and no loop."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from sqlalchemy import select

from ustun.http.preconditions import Preconditions
from ustun.service.specs.event_types import BY_NAME
from ustun.store import Database
from ustun.webhooks import operations
from ustun.webhooks.operational import (
    ATTEMPT_EXHAUSTED,
    ENDPOINT_DISABLED,
    ENDPOINT_ENABLED,
    ENDPOINT_RECOVERED,
)
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.dispatcher import Dispatcher
from ustun.webhooks.tables import deliveries, events
from webhook_support import SCHEDULE, MakeEndpoint, Receiver, send, status, until

OPS = "/ops"  # the account's endpoint for operational events
DOOMED = "/doomed"  # a business endpoint whose delivery dies


async def arrived(receiver: Receiver, path: str, event_type: str, count: int = 1) -> list[Any]:
    """Wait for `count` bodies of `event_type` at `path`; each checked against its catalogue
    schema (the one `/v1/event-types` and the documents serve)."""

    async def check() -> list[Any] | None:
        bodies = [json.loads(b) for b in receiver.bodies(path)]
        found = [b for b in bodies if b["type"] == event_type]
        return found if len(found) >= count else None

    found: list[Any] = await until(check, what=f"{count} {event_type} at {path}")
    validator = Draft202012Validator(BY_NAME[event_type].schema)
    for body in found:
        assert list(validator.iter_errors(body["data"])) == [], body
    return found


async def logged(db: Database, account_id: str, event_type: str) -> list[Any]:
    async with db.read() as conn:
        rows = await conn.execute(
            select(events).where(events.c.account_id == account_id, events.c.type == event_type)
        )
        return [json.loads(row.data) for row in rows]


async def test_dead_delivery_is_told_only_to_who_subscribed(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script[DOOMED] = [status(500)] * (len(SCHEDULE) + 1)
    doomed, _ = await make_endpoint(receiver.url(DOOMED), ("payment.*",))
    ops, _ = await make_endpoint(receiver.url(OPS), ("message.attempt.exhausted",))
    await make_endpoint(receiver.url("/all"), ("*",))
    prefix, _ = await make_endpoint(receiver.url("/prefix"), ("message.*",))
    event_id = await send(db, account_id, "payment.created")

    [body] = await arrived(receiver, OPS, ATTEMPT_EXHAUSTED)
    async with db.read() as conn:
        dead = (
            await conn.execute(select(deliveries).where(deliveries.c.endpoint_id == doomed))
        ).one()
    assert dead.status == "dead"
    assert body["data"] == {
        "object": "delivery",
        "delivery_id": dead.id,
        "endpoint_id": doomed,
        "url": receiver.url(DOOMED),
        "event_id": event_id,
        "event_type": "payment.created",
        "attempts": len(SCHEDULE) + 1,
        "last_status": 500,
        "last_error": None,
    }
    await arrived(receiver, "/prefix", ATTEMPT_EXHAUSTED)  # `message.*` names it
    # `*` does not select an opt-in operational event: no delivery of it to the `*` endpoint.
    async with db.read() as conn:
        targets = await conn.scalars(
            select(deliveries.c.endpoint_id).where(deliveries.c.event_id == body["id"])
        )
        assert set(targets) == {ops, prefix}
    assert len(await logged(db, account_id, ATTEMPT_EXHAUSTED)) == 1


async def test_410_disables_with_an_event_and_enabling_tells_too(
    db: Database,
    box: SecretBox,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/gone"] = [status(410)]
    gone, _ = await make_endpoint(receiver.url("/gone"), ("payment.*",))
    await make_endpoint(receiver.url(OPS), ("endpoint.*",))
    await send(db, account_id, "payment.created")

    [disabled] = await arrived(receiver, OPS, ENDPOINT_DISABLED)
    assert disabled["data"] == {
        "id": gone,
        "object": "webhook_endpoint",
        "url": receiver.url("/gone"),
        "reason": "the endpoint answered 410 Gone",
    }

    async def enable() -> None:
        await operations.update_endpoint(
            db, box, account_id, gone, {"enabled": True}, Preconditions(), allow_private=True
        )

    await enable()
    await enable()  # already enabled: nothing to tell
    [enabled] = await arrived(receiver, OPS, ENDPOINT_ENABLED)
    assert enabled["data"] == {
        "id": gone,
        "object": "webhook_endpoint",
        "url": receiver.url("/gone"),
        "reason": "enabled by request",
    }
    assert len(await logged(db, account_id, ENDPOINT_ENABLED)) == 1
    # The 410's delivery was dead-lettered: told to whoever names the type (nobody here).
    assert len(await logged(db, account_id, ATTEMPT_EXHAUSTED)) == 1


async def test_success_after_failures_is_a_recovery(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/flaky"] = [status(503), status(503)]
    flaky, _ = await make_endpoint(receiver.url("/flaky"), ("payment.*",))
    await make_endpoint(receiver.url(OPS), ("endpoint.recovered",))
    await send(db, account_id, "payment.created")

    [recovered] = await arrived(receiver, OPS, ENDPOINT_RECOVERED)
    assert recovered["data"] == {
        "id": flaky,
        "object": "webhook_endpoint",
        "url": receiver.url("/flaky"),
        "reason": "a delivery succeeded after failures",
    }
    later = await send(db, account_id, "payment.succeeded")  # healthy already: no new recovery

    async def later_succeeded() -> bool:
        async with db.read() as conn:
            row = (
                await conn.execute(
                    select(deliveries.c.status).where(
                        deliveries.c.event_id == later, deliveries.c.endpoint_id == flaky
                    )
                )
            ).one()
        return bool(row.status == "succeeded")

    await until(later_succeeded, what="the second payment event's delivery")
    assert len(await logged(db, account_id, ENDPOINT_RECOVERED)) == 1


async def test_a_dead_operational_delivery_tells_nobody(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    tries = len(SCHEDULE) + 1
    receiver.script[DOOMED] = [status(500)] * tries
    receiver.script[OPS] = [status(500)] * tries
    await make_endpoint(receiver.url(DOOMED), ("payment.*",))
    ops_id, _ = await make_endpoint(receiver.url(OPS), ("message.attempt.exhausted",))
    await send(db, account_id, "payment.created")

    async def ops_dead() -> bool:
        async with db.read() as conn:
            row = (
                await conn.execute(select(deliveries).where(deliveries.c.endpoint_id == ops_id))
            ).one_or_none()
        return row is not None and row.status == "dead"

    await until(ops_dead, what="the exhausted event's own delivery to die")
    assert len(receiver.bodies(OPS)) == tries
    told = await logged(db, account_id, ATTEMPT_EXHAUSTED)
    assert [t["event_type"] for t in told] == ["payment.created"]  # none about itself
