"""The receiver and `ustun listen` refuse, with a 4xx problem, what the signature check cannot
trust (a `webhook-timestamp` that is no time, a signed body nested too deep) instead of failing
with a 500 (issue 26, item 12)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from rich.console import Console
from starlette.types import ASGIApp

from ustun.http.signature import Secret, headers
from ustun.webhooks.receiving import printer
from ustun.webhooks.receiving.inbox import MemoryInbox
from ustun.webhooks.receiving.receiver import WebhookReceiver

SECRET = Secret.generate()
BODY = json.dumps({"id": "evt_1", "type": "payment.succeeded", "data": {"id": "pay_1"}}).encode()


@pytest.fixture(params=["receiver", "listen"])
async def app(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ASGIApp, list[str]]]:
    """A `WebhookReceiver`, or the app `ustun listen` serves, and the ids its handler saw."""
    ran: list[str] = []
    if request.param == "receiver":
        receiver = WebhookReceiver(str(SECRET), inbox=MemoryInbox())

        @receiver.on("*")
        async def handle(event: dict[str, Any]) -> None:
            ran.append(event["id"])

        yield receiver, ran
        await receiver.drain()
    else:
        out = io.StringIO()
        yield printer.app(str(SECRET), tolerance=300, console=Console(file=out)), ran


async def _post(app: ASGIApp, body: bytes, sent: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r") as c:
        return await c.post("/hook", content=body, headers=sent)


@pytest.mark.parametrize("timestamp", ["9" * 309, "9" * 400, "9" * 5000])
async def test_a_timestamp_that_is_no_time_is_a_401_problem(
    app: tuple[ASGIApp, list[str]], timestamp: str
) -> None:
    """From 309 digits on the skew overflowed a float: a 500, and a sender that retries."""
    receiving, ran = app
    sent = headers([SECRET], "evt_1", BODY) | {"webhook-timestamp": timestamp}
    answer = await _post(receiving, BODY, sent)
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"
    assert "year 9999" in answer.json()["detail"]
    assert ran == []


async def test_a_signed_body_nested_too_deep_is_a_401_problem(
    app: tuple[ASGIApp, list[str]],
) -> None:
    """Signed, but past the JSON parser's depth: a RecursionError, not a ValueError, before."""
    receiving, _ = app
    deep = b"[" * 100_000
    answer = await _post(receiving, deep, headers([SECRET], "evt_1", deep))
    assert answer.status_code == 401
    assert "nested too deep" in answer.json()["detail"]
