"""`POST /v1/events/{event_id}/expunge` and what an expunged event answers (both backends)."""

from __future__ import annotations

from typing import Any

import httpx

from support import free_port
from ustun.service import create_app
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import Handlers, Reconciler
from ustun.webhooks.receiving.inbox import MemoryInbox
from ustun.webhooks.retention import EXPUNGED_REASON
from webhook_support import serving_http, until

HOOK = "https://hooks.example.com/ustun"


async def _pinged(client: httpx.AsyncClient) -> tuple[str, dict[str, object]]:
    """An endpoint (never reached: no worker runs) and a ping event with its pending delivery."""
    made = await client.post("/v1/webhook-endpoints", json={"url": HOOK})
    assert made.status_code == 201, made.text
    endpoint_id = made.json()["id"]
    ping = await client.post(f"/v1/webhook-endpoints/{endpoint_id}/test")
    assert ping.status_code == 202, ping.text
    return endpoint_id, ping.json()


async def test_expunge_answers_the_event_without_its_payload(client: httpx.AsyncClient) -> None:
    _, event = await _pinged(client)
    assert event["data"] is not None
    path = f"/v1/events/{event['id']}"
    expunged = await client.post(f"{path}/expunge")
    assert expunged.status_code == 200, expunged.text
    body = expunged.json()
    assert body["data"] is None
    assert body["expunged_at"].endswith("Z")
    assert {k: body[k] for k in ("id", "object", "type", "created_at", "api_version")} == {
        k: event[k] for k in ("id", "object", "type", "created_at", "api_version")
    }
    again = await client.post(f"{path}/expunge")
    assert again.status_code == 200
    assert again.json() == body
    assert (await client.get(path)).json() == body
    listed = (await client.get("/v1/events")).json()["data"]
    assert [e for e in listed if e["id"] == event["id"]] == [body]


async def test_its_delivery_dies_unsent_and_a_retry_is_a_409(client: httpx.AsyncClient) -> None:
    endpoint_id, event = await _pinged(client)
    [pending] = (await client.get(f"/v1/deliveries?event_id={event['id']}")).json()["data"]
    assert pending["status"] == "pending"
    assert (await client.post(f"/v1/events/{event['id']}/expunge")).status_code == 200

    delivery = (await client.get(f"/v1/deliveries/{pending['id']}")).json()
    assert delivery["status"] == "dead"
    assert delivery["next_attempt_at"] is None
    assert delivery["attempt_count"] == 0
    assert [(a["status_code"], a["error"], a["response"]) for a in delivery["attempts"]] == [
        (None, EXPUNGED_REASON, None)
    ]
    retried = await client.post(f"/v1/deliveries/{pending['id']}/retry")
    assert retried.status_code == 409, retried.text
    assert retried.headers["content-type"].startswith("application/problem+json")
    problem = retried.json()
    assert problem["type"].endswith("/problems/event-expunged")
    assert problem["status"] == 409
    assert event["id"] in problem["detail"]
    assert (await client.get(f"/v1/deliveries/{pending['id']}")).json()["status"] == "dead"
    recovered = await client.post(
        f"/v1/webhook-endpoints/{endpoint_id}/recover", json={"since": "2000-01-01T00:00:00Z"}
    )
    assert recovered.status_code == 202, recovered.text
    assert recovered.json()["recovered"] == 0


async def test_another_accounts_event_is_not_found(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    _, event = await _pinged(client)
    path = f"/v1/events/{event['id']}"
    stranger = await other_client.post(f"{path}/expunge")
    assert stranger.status_code == 404
    assert stranger.json()["type"].endswith("/problems/not-found")
    assert (await client.get(path)).json()["data"] is not None  # untouched
    missing = await client.post("/v1/events/evt_nope/expunge")
    assert missing.status_code == 404


async def test_a_reconciler_skips_an_expunged_event(
    client: httpx.AsyncClient, settings: Settings, db: Database, api_key: str
) -> None:
    """A receiver catching up from the feed never gets an expunged event without its data."""
    endpoint_id, kept = await _pinged(client)
    gone = (await client.post(f"/v1/webhook-endpoints/{endpoint_id}/test")).json()
    last = (await client.post(f"/v1/webhook-endpoints/{endpoint_id}/test")).json()
    assert (await client.post(f"/v1/events/{gone['id']}/expunge")).status_code == 200
    handlers = Handlers()
    seen: list[dict[str, Any]] = []

    @handlers.on()
    async def record(event: dict[str, Any]) -> None:
        seen.append(event)

    port = free_port()
    async with serving_http(create_app(settings, db=db), port):
        reconciler = Reconciler(f"http://127.0.0.1:{port}", api_key, MemoryInbox(), handlers)

        async def reached_last() -> bool:
            await reconciler.run_once()
            return any(e["id"] == last["id"] for e in seen)

        await until(reached_last, within=60, what="the reconciler to read past the last ping")
    assert [e["id"] for e in seen] == [kept["id"], last["id"]]
    assert all(e["data"] is not None for e in seen)
