"""A broker publish always ends as an outcome, whatever the client library does (issue 26, items
7 and 14): a URL option that made aiormq raise out of the publisher killed the delivery task
(deliveries pending forever, no attempt, the in-flight count leaked), and a connect that
outlived the publishes waiting for it left its failure to asyncio's "Task exception was never
retrieved"."""

from __future__ import annotations

import asyncio
import binascii
import gc
from collections.abc import Callable
from typing import Any

import aio_pika
import pytest
from sqlalchemy import select, update

from broker_support import RABBITMQ_URL, event
from support import free_port
from ustun.http.signature import Secret
from ustun.keys import secret_box
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.brokers import Brokers, Destination
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.sending.transport import TIMED_OUT
from ustun.webhooks.tables import attempts, deliveries, endpoints
from webhook_support import serving, until

SECRET = Secret.generate()
NEVER_RETRIEVED = "exception was never retrieved"


async def test_a_saved_url_with_an_option_now_refused_fails_its_attempts(
    settings: Settings, db: Database, api_key: str
) -> None:
    """An endpoint saved before the allow-list with `?cadata=abc` (aiormq base64-decodes it in
    the delivery task): its delivery is attempted and fails, saying why, and others go on."""
    async with serving(settings, db, api_key) as client:
        body = {"kind": RABBITMQ, "url": RABBITMQ_URL, "exchange": "x", "events": ["payment.*"]}
        made = await client.post("/v1/webhook-endpoints", json=body)
        assert made.status_code == 201, made.text
        endpoint_id = made.json()["id"]
        sealed = secret_box(settings).seal(RABBITMQ_URL + "?cadata=abc", context=endpoint_id)
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                update(endpoints).where(endpoints.c.id == endpoint_id).values(broker_url=sealed)
            )
        paid = await client.post(
            "/v1/payments",
            json={"amount": 500, "currency": "EUR"},
            headers={"idempotency-key": f"legacy-{endpoint_id}"},
        )
        assert paid.status_code == 201, paid.text
        errors = await until(lambda: _attempt_errors(db, endpoint_id), what="an attempt")
        listed = await client.get("/v1/deliveries", params={"endpoint_id": endpoint_id})
    assert "the URL option 'cadata' is not allowed" in errors[0]
    assert [d["status"] for d in listed.json()["data"]] == ["failed"]


async def _attempt_errors(db: Database, endpoint_id: str) -> list[str]:
    async with db.read() as conn:
        found = await conn.scalars(
            select(attempts.c.error)
            .join(deliveries, attempts.c.delivery_id == deliveries.c.id)
            .where(deliveries.c.endpoint_id == endpoint_id)
        )
        return [str(e) for e in found]


async def test_an_unexpected_error_of_the_client_library_is_a_failed_attempt(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The error aiormq raised for `cadata=abc`, now from any cause: the publish is a failed
    attempt that names only the error's type (its text may show what the client read), the
    worker logs it, and the next publish connects again."""
    real = aio_pika.connect

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise binascii.Error("Incorrect padding in /etc/ssl/private/server.key")

    monkeypatch.setattr(aio_pika, "connect", broken)
    destination = Destination(RABBITMQ, RABBITMQ_URL, "missing-exchange")
    async with Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(destination, *event(SECRET).args())
        assert not got.ok
        assert got.error == "the rabbitmq client failed (Error)"
        monkeypatch.setattr(aio_pika, "connect", real)
        again = await brokers.publish(destination, *event(SECRET).args())
    assert "NOT_FOUND" in (again.response or ""), again
    assert "failed unexpectedly: Error: Incorrect padding" in caplog.text
    assert "guest:guest" not in caplog.text


async def _silent_server() -> tuple[asyncio.Server, int]:
    """A TCP server that accepts and never answers: a broker whose connect never completes."""
    server = await asyncio.start_server(lambda _, writer: None, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _opening() -> bool:
    """Whether a broker connection is still being opened in the background."""
    return any(
        getattr(task.get_coro(), "__qualname__", "") == "Brokers._open"
        for task in asyncio.all_tasks()
    )


@pytest.mark.parametrize("kind", [NATS, RABBITMQ])
async def test_a_connect_that_outlives_its_publishes_leaves_no_unretrieved_error(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The publish gives up at its deadline; the connect goes on (nats-py's connect timeout is
    a whole second, tried twice) and fails later, with nobody waiting for it."""
    server, port = await _silent_server()
    url = f"nats://127.0.0.1:{port}" if kind == NATS else f"amqp://guest:guest@127.0.0.1:{port}/"
    async with server, Brokers(timeout=0.2, allow_private=True) as brokers:
        got = await brokers.publish(Destination(kind, url, "x"), *event(SECRET).args())
        assert got.error == TIMED_OUT
        await until(_async(lambda: not _opening()), what="the connect to end")
        gc.collect()
    assert NEVER_RETRIEVED not in caplog.text


@pytest.mark.parametrize("kind", [NATS, RABBITMQ])
async def test_a_refused_connection_leaves_no_unretrieved_error(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}" if kind == NATS else f"amqp://guest:guest@127.0.0.1:{port}/"
    async with Brokers(timeout=2, allow_private=True) as brokers:
        outcomes = await asyncio.gather(
            *(brokers.publish(Destination(kind, url, "x"), *event(SECRET).args()) for _ in range(4))
        )
        await until(_async(lambda: not _opening()), what="the connect to end")
        gc.collect()
    assert all(not o.ok and o.error and "cannot connect" in o.error for o in outcomes), outcomes
    assert NEVER_RETRIEVED not in caplog.text


def _async(check: Callable[[], bool]) -> Callable[[], Any]:
    async def condition() -> bool:
        return check()

    return condition
