"""A receiver's `Webhook-Delivery: abort-message` answer stops its delivery's retries.

The classification unit-tested as the pure function it is, then the dispatcher against a real
local receiver on SQLite and PostgreSQL: dead after one attempt with the reason recorded, the
endpoint kept, the next event delivered, and an operator's retry still sent.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from ustun.store import Database
from ustun.webhooks.brokers import BrokerOutcome
from ustun.webhooks.operations import retry_delivery
from ustun.webhooks.sending.dispatcher import Dispatcher
from ustun.webhooks.sending.transport import TIMED_OUT, Outcome
from ustun.webhooks.sending.verdict import ABORTED_BY_RECEIVER, Verdict, aborts, verdict
from ustun.webhooks.tables import endpoints
from webhook_support import MakeEndpoint, Receiver, attempts_of, send, settled, status

ABORT = {"Webhook-Delivery": "abort-message"}


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("abort-message", True),
        ("Abort-Message", True),
        ("  ABORT-MESSAGE ", True),
        ("disable, abort-message", True),  # a repeated header, joined
        ("abort", False),  # not the value: ignored
        ("disable", False),  # Svix's other value: ignored here, 410 disables
        ("abort-messages", False),
        ("", False),
        (None, False),
    ],
)
def test_aborts_reads_the_header_value(header: str | None, wanted: bool) -> None:
    assert aborts(header) is wanted


@pytest.mark.parametrize(
    ("outcome", "wanted"),
    [
        (Outcome(200, 1.0, delivery="abort-message"), Verdict.SUCCEEDED),
        (Outcome(204, 1.0), Verdict.SUCCEEDED),
        (Outcome(500, 1.0, delivery="abort-message"), Verdict.ABORTED),
        (Outcome(503, 1.0, retry_after="5", delivery="Abort-Message"), Verdict.ABORTED),
        (Outcome(400, 1.0, delivery="abort-message"), Verdict.ABORTED),
        (Outcome(302, 1.0, delivery="abort-message"), Verdict.ABORTED),
        (Outcome(410, 1.0, delivery="abort-message"), Verdict.GONE),
        (Outcome(410, 1.0), Verdict.GONE),
        (Outcome(500, 1.0), Verdict.RETRY),
        (Outcome(500, 1.0, delivery="whatever"), Verdict.RETRY),
        (Outcome(None, 1.0, error=TIMED_OUT), Verdict.RETRY),
        (BrokerOutcome(None, 1.0, error="no such stream", permanent=True), Verdict.REFUSED),
        (BrokerOutcome(None, 1.0, error="nack"), Verdict.RETRY),
        (BrokerOutcome(None, 1.0, confirmed=True), Verdict.SUCCEEDED),
    ],
)
def test_verdict_classifies_an_attempt(outcome: Outcome, wanted: Verdict) -> None:
    assert verdict(outcome) is wanted


async def endpoint_row(db: Database, endpoint_id: str) -> Any:
    async with db.read() as conn:
        return (await conn.execute(select(endpoints).where(endpoints.c.id == endpoint_id))).one()


async def test_abort_makes_the_delivery_dead_after_one_attempt_and_keeps_the_endpoint(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    # Both the header's name and its value in a case of the receiver's own choosing.
    receiver.script["/hook"] = [status(500, {"WEBHOOK-DELIVERY": "Abort-Message"})]
    endpoint_id, _ = await make_endpoint(receiver.url())
    aborted = await send(db, account_id, "payment.created")
    row = await settled(db, aborted, "dead")
    assert row.attempt_count == 1
    assert row.next_attempt_at is None
    tried = await attempts_of(db, row.id)
    assert [(a.status_code, a.error, a.response) for a in tried] == [
        (500, ABORTED_BY_RECEIVER, "answer 500")
    ]
    endpoint = await endpoint_row(db, endpoint_id)
    assert endpoint.enabled is True
    assert endpoint.disabled_reason is None
    assert endpoint.failing_since is None  # a deliberate answer starts no failing streak

    following = await send(db, account_id, "payment.created", n=2)
    await settled(db, following, "succeeded")
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert ids == [aborted, following]  # the aborted one was never sent again


async def test_an_operator_retry_after_an_abort_is_sent(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/hook"] = [status(500, ABORT)]
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "dead")
    await retry_delivery(db, account_id, row.id)
    row = await settled(db, event_id, "succeeded")
    assert row.attempt_count == 2
    tried = await attempts_of(db, row.id)
    assert [(a.status_code, a.error) for a in tried] == [
        (500, ABORTED_BY_RECEIVER),
        (200, None),
    ]


async def test_without_the_header_a_500_is_retried_as_before(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    # An unknown value is no abort either.
    receiver.script["/hook"] = [status(500), status(500, {"Webhook-Delivery": "abort"})]
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "succeeded")
    assert row.attempt_count == 3
    tried = await attempts_of(db, row.id)
    assert [(a.status_code, a.error) for a in tried] == [(500, None), (500, None), (200, None)]


async def test_the_header_on_a_2xx_is_just_a_success(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/hook"] = [status(200, ABORT)]
    await make_endpoint(receiver.url())
    event_id = await send(db, account_id, "payment.created")
    row = await settled(db, event_id, "succeeded")
    assert row.attempt_count == 1
    assert [(a.status_code, a.error) for a in await attempts_of(db, row.id)] == [(200, None)]
