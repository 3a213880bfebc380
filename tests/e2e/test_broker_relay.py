"""`ustun serve` relays payments to RabbitMQ and NATS JetStream: endpoints created and payments
made over real HTTP, consumers on the real brokers feeding inboxes of their own; each event is
handled once on each broker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from broker_support import (
    NATS_URL,
    RABBITMQ_URL,
    nats_stream,
    rabbitmq_exchange,
    running,
    unique,
)
from support import Served
from ustun.store import Database
from ustun.webhooks.receiving.consumers import consume_nats, consume_rabbitmq
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.receiving.inbox import DatabaseInbox
from webhook_support import until

PAYMENTS = 5


def counting(handled: Counter[str]) -> Handlers:
    registry = Handlers(backoff=0.01)

    @registry.on("payment.created")
    async def count(event: dict[str, Any]) -> None:
        handled[event["id"]] += 1

    return registry


async def test_payments_made_over_http_are_handled_once_by_a_consumer_on_each_broker(
    served: Served, tmp_path: Path
) -> None:
    on_rabbitmq: Counter[str] = Counter()
    on_nats: Counter[str] = Counter()
    rabbit_inbox, nats_inbox = (Database(f"sqlite:///{tmp_path / n}.db") for n in ("r", "n"))
    try:
        await _relay(served, rabbit_inbox, nats_inbox, on_rabbitmq, on_nats)
    finally:
        for db in (rabbit_inbox, nats_inbox):
            await db.dispose()
    assert set(on_rabbitmq.values()) == set(on_nats.values()) == {1}


async def _relay(
    served: Served,
    rabbit_inbox: Database,
    nats_inbox: Database,
    on_rabbitmq: Counter[str],
    on_nats: Counter[str],
) -> None:
    """Make the endpoints and the payments; return once both consumers handled every event."""
    auth = {"authorization": f"Bearer {served.key}"}
    async with (
        rabbitmq_exchange() as exchange,
        nats_stream() as (_, subject),
        httpx.AsyncClient(base_url=served.base_url, headers=auth) as api,
    ):
        bodies = [
            {"kind": "rabbitmq", "url": RABBITMQ_URL, "exchange": exchange.name},
            {"kind": "nats", "url": NATS_URL, "subject": subject},
        ]
        secrets = []
        for body in bodies:
            made = await api.post("/v1/webhook-endpoints", json={"events": ["payment.*"], **body})
            assert made.status_code == 201, made.text
            secrets.append(made.json()["secret"])
        consumers = (
            consume_rabbitmq(
                RABBITMQ_URL,
                exchange.queue,
                DatabaseInbox(rabbit_inbox),
                counting(on_rabbitmq),
                secret=secrets[0],
            ),
            consume_nats(
                NATS_URL,
                subject,
                unique("ustun-test-c"),
                DatabaseInbox(nats_inbox),
                counting(on_nats),
                secret=secrets[1],
            ),
        )
        async with running(consumers[0]), running(consumers[1]):
            paid = []
            for _ in range(PAYMENTS):
                made = await api.post(
                    "/v1/payments",
                    json={"amount": 700, "currency": "EUR"},
                    headers={"idempotency-key": unique("pay")},
                )
                assert made.status_code == 201, made.text
                paid.append(made.json()["id"])
            logged = await api.get("/v1/events", params={"type": "payment.created"})
            sent = {e["id"] for e in logged.json()["data"] if e["data"]["id"] in paid}
            assert len(sent) == PAYMENTS

            async def both_handled() -> bool:
                return set(on_rabbitmq) == set(on_nats) == sent

            await until(both_handled, within=30, what="every payment on both brokers")
