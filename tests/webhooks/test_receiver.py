"""The receiver: verify, deduplicate by webhook-id, answer at once, retry the handler."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from support import free_port
from ustun import ids
from ustun.http.signature import Secret, headers
from ustun.store import Database
from ustun.webhooks.dispatcher import Dispatcher
from ustun.webhooks.inbox import DatabaseInbox
from ustun.webhooks.outbox import emit
from ustun.webhooks.receiver import WebhookReceiver
from webhook_support import MakeEndpoint, until

SECRET = Secret.generate()


def signed(
    event_type: str = "payment.succeeded", webhook_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    webhook_id = webhook_id or ids.new_id("evt")
    body = json.dumps({"id": webhook_id, "type": event_type, "data": {"id": "pay_1"}}).encode()
    return headers([SECRET], webhook_id, body), body


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

    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/webhooks", got, methods=["POST"])]),
            port=port,
            log_level="warning",
        )
    )
    serving = asyncio.create_task(server.serve())
    try:
        await until(lambda: _started(server), what="uvicorn to start")
        async with db.unit_of_work() as uow:
            event_id = await emit(uow, account_id, "payment.created", {"id": "pay_7"})

        async def arrived() -> bool:
            return bool(handled)

        await until(arrived, what="the event to reach the handler")
        assert handled[0]["id"] == event_id
    finally:
        server.should_exit = True
        await serving
        await got.drain()


async def _started(server: uvicorn.Server) -> bool:
    return server.started
