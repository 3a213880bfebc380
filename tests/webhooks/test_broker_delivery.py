"""Broker endpoints end to end: payments committed through the API, relayed by the service's own
dispatcher to the real RabbitMQ and NATS JetStream, taken by the consumers into an inbox. Each
event arrives once; a rolled-back request publishes nothing; a broker that goes away and comes
back loses nothing; a refused message retries, dies after the schedule, and Retry sends it."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from broker_support import (
    NATS_URL,
    RABBITMQ_URL,
    CountingInbox,
    NatsServer,
    Proxy,
    drain_queue,
    nats_stream,
    rabbitmq_exchange,
    running,
    stream_messages,
    unique,
)
from dashboard_support import log_in
from ustun.service import resources
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import verify
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.receiving.consumers import consume_nats, consume_rabbitmq
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.tables import attempts, deliveries
from webhook_support import serving, until

PAYMENTS = 6


async def _pay(client: httpx.AsyncClient, n: int, description: str | None = None) -> list[str]:
    """Create `n` payments; the ids of their `payment.created` events."""
    made = []
    for _ in range(n):
        paid = await client.post(
            "/v1/payments",
            json={"amount": 500, "currency": "EUR", "description": description},
            headers={"idempotency-key": unique("pay")},
        )
        assert paid.status_code == 201, paid.text
        made.append(paid.json()["id"])
    logged = (
        await client.get("/v1/events", params={"type": "payment.created", "limit": 100})
    ).json()
    return [e["id"] for e in logged["data"] if e["data"]["id"] in made]


async def _endpoint(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    made = await client.post("/v1/webhook-endpoints", json={"events": ["payment.*"], **body})
    assert made.status_code == 201, made.text
    assert "guest:guest" not in made.text
    return dict(made.json())


async def _statuses(client: httpx.AsyncClient, endpoint_id: str) -> Counter[str]:
    listed = await client.get("/v1/deliveries", params={"endpoint_id": endpoint_id, "limit": 100})
    return Counter(d["status"] for d in listed.json()["data"])


async def _attempts(db: Database, endpoint_id: str, *, failed: bool) -> int:
    """How many attempts the endpoint's deliveries made (failed ones, or successful ones)."""
    async with db.read() as conn:
        counted = await conn.scalar(
            select(func.count())
            .select_from(attempts.join(deliveries, attempts.c.delivery_id == deliveries.c.id))
            .where(
                deliveries.c.endpoint_id == endpoint_id,
                attempts.c.error.is_not(None) if failed else attempts.c.error.is_(None),
            )
        )
    return int(counted or 0)


async def test_payments_reach_a_rabbitmq_queue_and_a_nats_stream_once_each(
    settings: Settings, db: Database, api_key: str
) -> None:
    async with (
        rabbitmq_exchange() as exchange,
        nats_stream() as (stream, subject),
        serving(settings, db, api_key) as client,
    ):
        amqp = await _endpoint(
            client, {"kind": RABBITMQ, "url": RABBITMQ_URL, "exchange": exchange.name}
        )
        assert (amqp["kind"], amqp["exchange"], amqp["subject"]) == (RABBITMQ, exchange.name, None)
        assert amqp["url"] == "amqp://127.0.0.1:5672/"
        jet = await _endpoint(client, {"kind": NATS, "url": NATS_URL, "subject": subject})
        assert (jet["kind"], jet["exchange"], jet["subject"]) == (NATS, None, subject)
        sent = await _pay(client, PAYMENTS)
        assert len(sent) == PAYMENTS
        for endpoint in (amqp, jet):
            await until(
                lambda e=endpoint: _all_succeeded(client, e["id"], PAYMENTS),
                what="every delivery to succeed",
            )
        queued = await drain_queue(exchange.queue)
        stored = await stream_messages(stream, subject)
    assert sorted(m.message_id or "" for m in queued) == sorted(sent)
    assert {m.routing_key for m in queued} == {"payment.created"}
    for m in queued:
        headers = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in m.headers.items()}
        assert verify(amqp["secret"], headers, m.body)["id"] == m.message_id
    assert sorted(str(m["headers"]["Nats-Msg-Id"]) for m in stored) == sorted(sent)
    for m in stored:
        assert m["body"]["id"] == m["headers"]["webhook-id"]  # type: ignore[index]


async def _all_succeeded(client: httpx.AsyncClient, endpoint_id: str, n: int) -> bool:
    return await _statuses(client, endpoint_id) == Counter({"succeeded": n})


async def test_a_rolled_back_request_publishes_nothing(
    settings: Settings, db: Database, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        rabbitmq_exchange() as exchange,
        serving(settings, db, api_key) as client,
    ):
        amqp = await _endpoint(
            client, {"kind": RABBITMQ, "url": RABBITMQ_URL, "exchange": exchange.name}
        )
        real_emit = resources.payments.emit

        async def emit_then_fail(*args: Any, **kwargs: Any) -> str:
            await real_emit(*args, **kwargs)
            raise RuntimeError("the request fails after emitting")

        with monkeypatch.context() as patched:
            patched.setattr(resources.payments, "emit", emit_then_fail)
            with pytest.raises(RuntimeError, match="after emitting"):
                await _pay(client, 1)
        # A later commit's event arrives; the rolled-back one, logged first, never does.
        [kept] = await _pay(client, 1)
        await until(lambda: _all_succeeded(client, amqp["id"], 1), what="the kept payment")
        queued = await drain_queue(exchange.queue)
    assert [m.message_id for m in queued] == [kept]


@contextlib.asynccontextmanager
async def _rabbitmq_behind_a_proxy(_: Path) -> AsyncIterator[tuple[dict[str, Any], Any, Any]]:
    """A RabbitMQ endpoint body reaching the broker through a proxy, a consumer factory on the
    broker itself, and (cut, restore) for the outage."""
    async with rabbitmq_exchange() as exchange, Proxy(5672) as proxy:
        body = {"kind": RABBITMQ, "url": proxy.url(), "exchange": exchange.name}

        def consumer(inbox: CountingInbox, handlers: Handlers, secret: str) -> Any:
            return consume_rabbitmq(RABBITMQ_URL, exchange.queue, inbox, handlers, secret=secret)

        yield body, consumer, (proxy.cut, proxy.start)


@contextlib.asynccontextmanager
async def _own_nats_server(store: Path) -> AsyncIterator[tuple[dict[str, Any], Any, Any]]:
    """A NATS endpoint body on a server of this test's own, a consumer factory, and (stop,
    start) for the outage."""
    server = await NatsServer(store).start()
    try:
        async with nats_stream(server.url) as (_, subject):
            body = {"kind": NATS, "url": server.url, "subject": subject}
            durable = unique("ustun-test-c")

            def consumer(inbox: CountingInbox, handlers: Handlers, secret: str) -> Any:
                return consume_nats(server.url, subject, durable, inbox, handlers, secret=secret)

            yield body, consumer, (server.stop, server.start)
    finally:
        await server.stop()


OUTAGES = {RABBITMQ: _rabbitmq_behind_a_proxy, NATS: _own_nats_server}


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_a_broker_down_mid_run_loses_nothing_and_each_event_is_handled_once(
    kind: str,
    settings: Settings,
    db: Database,
    api_key: str,
    tmp_path: Path,
    inbox: CountingInbox,
    handlers: Handlers,
    handled: Counter[str],
) -> None:
    schedule = "0.2,0.4,0.8,1.6,3.2,6.4"
    async with (
        OUTAGES[kind](tmp_path) as (body, consumer, (stop, start)),
        serving(
            settings, db, api_key, webhook_retry_schedule=schedule, webhook_timeout=2
        ) as client,
    ):
        endpoint = await _endpoint(client, body)
        async with running(consumer(inbox, handlers, endpoint["secret"])):
            before = await _pay(client, PAYMENTS)
            await until(lambda: _handled(handled, before), what="the events before the outage")
            await stop()
            during = await _pay(client, PAYMENTS)
            await until(lambda: _attempts(db, endpoint["id"], failed=True), what="a failed attempt")
            await start()
            await until(lambda: _handled(handled, before + during), within=30, what="every event")
            await until(
                lambda: _all_succeeded(client, endpoint["id"], 2 * PAYMENTS),
                what="every delivery to succeed",
            )
    assert set(handled) == set(before + during)
    assert set(handled.values()) == {1}
    # A message the broker took twice is one whose confirm was lost: its attempt then failed.
    extra = inbox.claims - 2 * PAYMENTS
    assert 0 <= extra <= await _attempts(db, endpoint["id"], failed=True)
    assert await _attempts(db, endpoint["id"], failed=False) == 2 * PAYMENTS


async def _handled(handled: Counter[str], ids: list[str]) -> bool:
    return set(ids) <= set(handled)


@pytest.mark.parametrize("via", ["api", "dashboard"])
async def test_a_refused_message_retries_dies_after_the_schedule_and_retry_sends_it(
    via: str, settings: Settings, db: Database, api_key: str
) -> None:
    subject = unique("ustun.test.late")
    async with serving(settings, db, api_key, webhook_retry_schedule="0.1,0.1") as client:
        endpoint = await _endpoint(client, {"kind": NATS, "url": NATS_URL, "subject": subject})
        [sent] = await _pay(client, 1)
        await until(lambda: _has_status(client, endpoint["id"], "dead"), what="the delivery to die")
        listed = await client.get("/v1/deliveries", params={"endpoint_id": endpoint["id"]})
        [delivery] = listed.json()["data"]
        shown = (await client.get(f"/v1/deliveries/{delivery['id']}")).json()
        assert len(shown["attempts"]) == 3
        assert all("no JetStream stream" in a["error"] for a in shown["attempts"])
        async with nats_stream(subject=subject) as (stream, _):
            await _retry(client, api_key, delivery["id"], via)
            await until(lambda: _all_succeeded(client, endpoint["id"], 1), what="the retry")
            stored = await stream_messages(stream, subject)
    assert [m["headers"]["Nats-Msg-Id"] for m in stored] == [sent]
    assert stored[0]["body"]["id"] == sent  # type: ignore[index]


async def _retry(client: httpx.AsyncClient, api_key: str, delivery_id: str, via: str) -> None:
    """Retry the delivery with the API, or with the dashboard's button."""
    if via == "api":
        retried = await client.post(f"/v1/deliveries/{delivery_id}/retry")
        assert retried.status_code == 202, retried.text
        return
    csrf = await log_in(client, api_key)
    retried = await client.post(
        f"/dashboard/deliveries/{delivery_id}/retry", data={"csrf_token": csrf}
    )
    assert retried.status_code == 303, retried.text


async def _has_status(client: httpx.AsyncClient, endpoint_id: str, status: str) -> bool:
    return status in await _statuses(client, endpoint_id)


async def test_a_message_the_broker_can_never_take_is_dead_at_once(
    settings: Settings, db: Database, api_key: str, tmp_path: Path
) -> None:
    config = tmp_path / "nats.conf"
    config.write_text("max_payload: 900\n")
    server = await NatsServer(tmp_path / "store", extra=("-c", str(config))).start()
    try:
        async with (
            nats_stream(server.url) as (_, subject),
            serving(settings, db, api_key, webhook_retry_schedule="0.1,0.1") as client,
        ):
            body = {"kind": NATS, "url": server.url, "subject": subject}
            endpoint = await _endpoint(client, body)
            await _pay(client, 1, description="x" * 1000)
            await until(
                lambda: _has_status(client, endpoint["id"], "dead"), what="the delivery to die"
            )
            listed = await client.get("/v1/deliveries", params={"endpoint_id": endpoint["id"]})
            [delivery] = listed.json()["data"]
            shown = (await client.get(f"/v1/deliveries/{delivery['id']}")).json()
    finally:
        await server.stop()
    [attempt] = shown["attempts"]
    assert "over the server's limit" in attempt["error"]
