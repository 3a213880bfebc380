"""The Reconciler: a receiver that missed deliveries catches up from the provider's event feed,
through the same inbox and handlers as its HTTP receiver, each event handled once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from support import USTUN, free_port
from ustun.client import AsyncClient
from ustun.service import create_app
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import Handlers, Reconciler
from ustun.webhooks.receiving.cursors import DatabaseCursors
from ustun.webhooks.receiving.inbox import DatabaseInbox
from ustun.webhooks.receiving.receiver import WebhookReceiver
from webhook_support import serving_http, until


@dataclass
class Provider:
    """A ustun service with its worker, over real HTTP, and a client with the account's key."""

    url: str
    api: AsyncClient

    async def pay(self) -> str:
        made = await self.api.post("/v1/payments", json={"amount": 100, "currency": "EUR"})
        assert made.status_code == 201, made.text
        events = (await self.api.get("/v1/events", params={"limit": 1})).json()["data"]
        assert events[0]["data"]["id"] == made.json()["id"]
        return str(events[0]["id"])

    async def dead(self, endpoint_id: str) -> int:
        params = {"endpoint_id": endpoint_id, "status": "dead", "limit": 100}
        return len((await self.api.get("/v1/deliveries", params=params)).json()["data"])


@pytest.fixture
async def provider(settings: Settings, db: Database, api_key: str) -> AsyncIterator[Provider]:
    # A whole retry schedule of 0.3 s: a receiver down for a second is down past all of it (no
    # circuit breaker, which would hold the deliveries back instead).
    quick = {"webhook_retry_schedule": "0.1,0.2", "webhook_circuit_failures": 0}
    tuned = settings.model_copy(update={"webhook_allow_private": True, **quick})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with (
        serving_http(create_app(tuned, db=db, worker=True), port),
        AsyncClient(base_url=url, api_key=api_key) as api,
    ):
        yield Provider(url, api)


@contextlib.asynccontextmanager
async def receiving(receiver: WebhookReceiver, port: int) -> AsyncIterator[None]:
    async with serving_http(Starlette(routes=[Route("/hook", receiver, methods=["POST"])]), port):
        yield
    await receiver.drain()


async def test_a_receiver_down_past_the_retry_schedule_catches_up_once_per_event(
    provider: Provider, api_key: str, tmp_path: Path
) -> None:
    receiver_db = Database(f"sqlite:///{tmp_path / 'receiver.db'}")
    inbox = DatabaseInbox(receiver_db)
    handlers = Handlers(backoff=0.01)
    handled: Counter[str] = Counter()

    @handlers.on("payment.*")
    async def count(event: dict[str, Any]) -> None:
        assert set(event) == {"id", "type", "created_at", "api_version", "data"}
        handled[event["id"]] += 1

    port = free_port()
    made = await provider.api.post(
        "/v1/webhook-endpoints",
        json={"url": f"http://127.0.0.1:{port}/hook", "signature": "ed25519"},
    )
    endpoint = made.json()
    receiver = WebhookReceiver(endpoint["public_key"], inbox=inbox, handlers=handlers)
    try:
        async with receiving(receiver, port):
            delivered = await provider.pay()
            await until(lambda: _has(handled, delivered), what="the delivery while up")

        # Down: every delivery runs through its whole retry schedule and dies.
        missed = [await provider.pay() for _ in range(3)]
        await until(lambda: _equals(provider.dead(endpoint["id"]), 3), what="3 dead deliveries")

        reconciler = Reconciler(provider.url, api_key, inbox, handlers, page_size=2)
        caught_up = 0

        async def all_handled() -> bool:
            nonlocal caught_up
            caught_up += await reconciler.run_once()
            return set(handled) == {delivered, *missed}

        # On PostgreSQL any transaction open on the server holds the feed back a while.
        await until(all_handled, within=60, what="the reconciler to catch up")
        # The account's feed also holds ustun's report of each dead delivery
        # (`message.attempt.exhausted`), which the receiver had not seen either.
        assert caught_up == len(missed) * 2
        assert await reconciler.run_once() == 0
        assert await DatabaseCursors(receiver_db).load(provider.url) is not None

        # Periodic mode picks up what is missed later; the receiver back up ignores repeats.
        stopping = asyncio.Event()
        periodic = asyncio.create_task(reconciler.run(stopping, interval=0.05))
        later = await provider.pay()
        await until(lambda: _has(handled, later), within=60, what="the periodic reconciler")
        stopping.set()
        await asyncio.wait_for(periodic, 10)
        async with receiving(receiver, port):
            dead = await provider.api.get(
                "/v1/deliveries", params={"endpoint_id": endpoint["id"], "status": "dead"}
            )
            for delivery in dead.json()["data"]:
                retried = await provider.api.post(f"/v1/deliveries/{delivery['id']}/retry")
                assert retried.is_success
            await until(
                lambda: _equals(provider.dead(endpoint["id"]), 0), what="the retries to succeed"
            )
        assert handled == dict.fromkeys([delivered, *missed, later], 1)
    finally:
        await receiver_db.dispose()


async def test_a_new_reconciler_starts_at_since_then_at_its_stored_cursor(
    provider: Provider, api_key: str, tmp_path: Path
) -> None:
    receiver_db = Database(f"sqlite:///{tmp_path / 'receiver.db'}")
    handlers = Handlers()
    seen: list[str] = []

    @handlers.on()
    async def record(event: dict[str, Any]) -> None:
        seen.append(event["id"])

    try:
        await provider.pay()
        cut = datetime.now(UTC)
        after_cut = await provider.pay()
        first = Reconciler(provider.url, api_key, DatabaseInbox(receiver_db), handlers, since=cut)
        await until(lambda: _ran(first, seen, [after_cut]), within=60, what="the first run")
        newest = await provider.pay()
        # A new process: a new reconciler over the same database resumes from the cursor.
        again = Reconciler(provider.url, api_key, DatabaseInbox(receiver_db), handlers)
        await until(lambda: _ran(again, seen, [after_cut, newest]), within=60, what="resuming")
    finally:
        await receiver_db.dispose()


async def _ran(reconciler: Reconciler, seen: list[str], expected: list[str]) -> bool:
    await reconciler.run_once()
    return seen == expected


async def _has(handled: Counter[str], event_id: str) -> bool:
    return event_id in handled


async def _equals(count: Awaitable[int], n: int) -> bool:
    return await count == n


async def _ustun(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """`ustun <args>` as a process, awaited without blocking the provider served in this loop."""
    bare = {"PATH": "/usr/bin:/bin", **env}
    if "PYTHONPATH" in os.environ:
        bare["PYTHONPATH"] = os.environ["PYTHONPATH"]
    process = await asyncio.create_subprocess_exec(USTUN, *args, env=bare, stdout=PIPE, stderr=PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_ustun_reconcile_prints_what_the_inbox_has_not_seen(
    provider: Provider, api_key: str, tmp_path: Path
) -> None:
    env = {
        "USTUN_DATABASE_URL": f"sqlite:///{tmp_path / 'receiver.db'}",
        "USTUN_RECONCILE_API_KEY": api_key,
    }
    paid = [await provider.pay(), await provider.pay()]
    printed: list[str] = []

    async def printed_all() -> bool:
        code, out, err = await _ustun("reconcile", "--url", provider.url, env=env)
        assert code == 0, err
        assert "missed event(s)" in err
        printed.extend(json.loads(line)["id"] for line in out.splitlines())
        return printed == paid

    await until(printed_all, within=60, what="`ustun reconcile` to print both events")
    code, out, err = await _ustun("reconcile", "--url", provider.url, env=env)
    assert (code, out) == (0, "")
    assert "handled 0 missed event(s)" in err

    refused = await _ustun(
        "reconcile", "--url", provider.url, env={**env, "USTUN_RECONCILE_API_KEY": "ustun_sk_no"}
    )
    assert refused[0] == 1
    assert "401" in refused[2]
    assert "ustun_sk_no" not in refused[2]
