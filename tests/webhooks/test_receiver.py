"""The receiver: verify, deduplicate by webhook-id, answer at once, retry the handler."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from support import drop_pg_database, free_port, make_pg_database
from ustun import ids
from ustun.errors import TablesMissing
from ustun.http.signature import Secret, headers
from ustun.store import Database
from ustun.webhooks.receiving.inbox import DatabaseInbox
from ustun.webhooks.receiving.receiver import MAX_BODY, WebhookReceiver
from ustun.webhooks.sending.dispatcher import Dispatcher
from ustun.webhooks.sending.outbox import emit
from webhook_support import MakeEndpoint, serving_http, until

SECRET = Secret.generate()


def signed(
    event_type: str = "payment.succeeded", webhook_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    webhook_id = webhook_id or ids.new_id("evt")
    body = json.dumps({"id": webhook_id, "type": event_type, "data": {"id": "pay_1"}}).encode()
    return headers([SECRET], webhook_id, body), body


@pytest.fixture
async def served(db: Database) -> AsyncIterator[tuple[WebhookReceiver, str]]:
    """A receiver over real HTTP (uvicorn) with a database inbox, and its URL."""
    got = WebhookReceiver(str(SECRET), inbox=DatabaseInbox(db), backoff=0.01)
    port = free_port()
    async with uvicorn_serving(got, port):
        yield got, f"http://127.0.0.1:{port}/webhooks"
    await got.drain()


@pytest.fixture
async def receiver(db: Database) -> AsyncIterator[tuple[WebhookReceiver, httpx.AsyncClient]]:
    got = WebhookReceiver(str(SECRET), inbox=DatabaseInbox(db), backoff=0.01)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=got), base_url="http://r"
    ) as http:
        yield got, http
    await got.drain()


async def test_duplicate_runs_the_handler_once(
    receiver: tuple[WebhookReceiver, httpx.AsyncClient],
) -> None:
    got, http = receiver
    seen: list[str] = []

    @got.on("payment.*")
    async def handle(event: dict[str, Any]) -> None:
        seen.append(event["id"])

    hdrs, body = signed()
    answers = await asyncio.gather(*(http.post("/", content=body, headers=hdrs) for _ in range(10)))
    assert sorted(a.status_code for a in answers) == [200] * 9 + [204]
    await got.drain()
    assert seen == [hdrs["webhook-id"]]
    assert (await http.post("/", content=body, headers=hdrs)).status_code == 200
    await got.drain()
    assert len(seen) == 1


async def test_handler_failure_is_retried_inside_the_receiver(
    receiver: tuple[WebhookReceiver, httpx.AsyncClient],
) -> None:
    got, http = receiver
    calls: list[int] = []

    @got.on("*")
    async def flaky(event: dict[str, Any]) -> None:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("database hiccup")

    hdrs, body = signed()
    answer = await http.post("/", content=body, headers=hdrs)
    assert answer.status_code == 204  # answered before the handler ran, failures stay here
    await got.drain()
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (lambda h, b: ({**h, "webhook-signature": "v1,Zm9yZ2VkIQ=="}, b), "signature"),
        (lambda h, b: (h, b + b" "), "signature"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "webhook-id"}, b), "missing"),
        (lambda h, b: ({**h, "webhook-timestamp": "1000"}, b), "old"),
    ],
)
async def test_refuses_unverified(
    receiver: tuple[WebhookReceiver, httpx.AsyncClient], tamper: Any, why: str
) -> None:
    got, http = receiver
    ran: list[str] = []

    @got.on("*")
    async def handle(event: dict[str, Any]) -> None:
        ran.append(event["id"])

    hdrs, body = tamper(*signed())
    answer = await http.post("/", content=body, headers=hdrs)
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"
    assert why in answer.json()["detail"]
    await got.drain()
    assert ran == []


async def test_end_to_end_dispatcher_to_a_uvicorn_receiver(
    db: Database, account_id: str, make_endpoint: MakeEndpoint, dispatcher: Dispatcher
) -> None:
    port = free_port()
    _, secret = await make_endpoint(f"http://127.0.0.1:{port}/webhooks")
    handled: list[dict[str, Any]] = []
    got = WebhookReceiver(secret, inbox=DatabaseInbox(db))

    @got.on("payment.created")
    async def handle(event: dict[str, Any]) -> None:
        handled.append(event)

    async with uvicorn_serving(got, port):
        async with db.unit_of_work() as uow:
            event_id = await emit(uow, account_id, "payment.created", {"id": "pay_7"})

        async def arrived() -> bool:
            return bool(handled)

        await until(arrived, what="the event to reach the handler")
        assert handled[0]["id"] == event_id
    await got.drain()


async def test_a_replay_with_a_repeated_webhook_header_is_refused(
    served: tuple[WebhookReceiver, str],
) -> None:
    got, url = served
    seen: list[str] = []

    @got.on("*")
    async def handle(event: dict[str, Any]) -> None:
        seen.append(event["id"])

    hdrs, body = signed()
    fresh, _ = signed()
    async with httpx.AsyncClient() as http:
        assert (await http.post(url, content=body, headers=hdrs)).status_code == 204
        for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
            # The captured delivery again, with a fresh value first and the signed one last.
            replayed = [(name, fresh[name]), *hdrs.items()]
            answer = await http.post(url, content=body, headers=replayed)
            assert answer.status_code == 400, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"].endswith("/problems/webhook-header-repeated")
            assert name in answer.json()["detail"]
    await got.drain()
    assert seen == [hdrs["webhook-id"]]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_an_oversized_body_is_refused_before_it_is_read_whole(
    served: tuple[WebhookReceiver, str], framing: str
) -> None:
    _, url = served
    hdrs, _ = signed()
    if framing == "content-length":
        # Announced over the limit, and never sent at all.
        framed, chunks = f"content-length: {2 * MAX_BODY}", []
    else:
        # One byte over the limit, and then the body never ends (no last chunk).
        piece = b"x" * 65_536
        chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
        framed, chunks = "transfer-encoding: chunked", [chunk] * (MAX_BODY // len(piece))
        chunks.append(b"1\r\nx\r\n")
    url_parts = httpx.URL(url)
    head = "".join(f"{name}: {value}\r\n" for name, value in hdrs.items())
    reader, writer = await asyncio.open_connection(url_parts.host, url_parts.port)
    try:
        writer.write(
            f"POST {url_parts.path} HTTP/1.1\r\nhost: {url_parts.host}\r\n"
            f"content-type: application/json\r\n{head}{framed}\r\n\r\n".encode()
        )
        writer.writelines(chunks)
        await writer.drain()
        # The receiver answers and closes while the body is still unfinished.
        response = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    assert response.startswith(b"HTTP/1.1 413 "), response[:200]
    assert b"application/problem+json" in response
    assert b"/problems/payload-too-large" in response


@contextlib.asynccontextmanager
async def uvicorn_serving(app: ASGIApp, port: int) -> AsyncIterator[None]:
    """`app` on 127.0.0.1:`port` (uvicorn, in this event loop) for the body of the `with`."""
    async with serving_http(Starlette(routes=[Route("/webhooks", app, methods=["POST"])]), port):
        yield


async def test_inbox_table_is_checked_once_before_the_first_claim(tmp_path: Path) -> None:
    """SQLite: the first delivery creates the inbox; on PostgreSQL the same raises one line."""
    db = Database(f"sqlite:///{tmp_path / 'fresh.db'}")
    got = WebhookReceiver(str(SECRET), inbox=DatabaseInbox(db), backoff=0.01)
    transport = httpx.ASGITransport(app=got)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://r") as http:
            headers_, body = signed()
            first = await http.post("/", headers=headers_, content=body)
            assert first.status_code == 204
            async with db.unit_of_work() as uow:
                await uow.conn.execute(text("DROP TABLE webhook_inbox"))
            # Checked once: a table dropped later is not looked for again on the hot path.
            headers_, body = signed()
            # The claim runs on the driver's connection (`webhooks.adapters.plans.claim_inbox`).
            with pytest.raises(sqlite3.OperationalError, match="no such table: webhook_inbox"):
                await http.post("/", headers=headers_, content=body)
        await got.drain()
    finally:
        await db.dispose()


async def test_missing_inbox_on_postgresql_is_the_one_line() -> None:
    name, url = await asyncio.to_thread(make_pg_database)
    db = Database(url)
    got = WebhookReceiver(str(SECRET), inbox=DatabaseInbox(db))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=got), base_url="http://r"
        ) as http:
            headers_, body = signed()
            with pytest.raises(TablesMissing, match=r"^table webhook_inbox is missing: run `ustun"):
                await http.post("/", headers=headers_, content=body)
    finally:
        await db.dispose()
        await asyncio.to_thread(drop_pg_database, name)
