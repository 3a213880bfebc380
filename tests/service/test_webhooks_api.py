"""The webhook management API: endpoints, events, event types, deliveries (both backends)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from support import free_port
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import verify
from webhook_support import serving

HOOK = "https://hooks.example.com/ustun"


async def _wait(client: httpx.AsyncClient, path: str, check: Any, what: str) -> Any:
    for _ in range(300):
        body = (await client.get(path)).json()
        if check(body):
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_create_shows_the_secret_once(client: httpx.AsyncClient) -> None:
    made = await client.post(
        "/v1/webhook-endpoints", json={"url": HOOK, "events": ["payment.*"], "description": "d"}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["id"].startswith("we_")
    assert body["secret"].startswith("whsec_")
    assert made.headers["location"] == f"/v1/webhook-endpoints/{body['id']}"
    assert made.headers["etag"] == '"1"'
    assert body["events"] == ["payment.*"]
    assert body["max_in_flight"] == 8
    got = await client.get(f"/v1/webhook-endpoints/{body['id']}")
    assert "secret" not in got.json()
    listed = (await client.get("/v1/webhook-endpoints")).json()
    assert [e["id"] for e in listed["data"]] == [body["id"]]
    assert "secret" not in listed["data"][0]


async def test_a_fifo_endpoint_shows_what_it_waits_on(client: httpx.AsyncClient) -> None:
    made = await client.post("/v1/webhook-endpoints", json={"url": HOOK, "ordering": "fifo"})
    assert made.status_code == 201, made.text
    endpoint = made.json()
    assert endpoint["ordering"] == "fifo"
    head_path = f"/v1/webhook-endpoints/{endpoint['id']}/head"
    empty = await client.get(head_path)
    assert empty.status_code == 200, empty.text
    assert empty.json() == {
        "object": "endpoint_head",
        "endpoint_id": endpoint["id"],
        "ordering": "fifo",
        "delivery": None,
    }
    ping = (await client.post(f"/v1/webhook-endpoints/{endpoint['id']}/test")).json()
    waiting = (await client.get(head_path)).json()["delivery"]
    assert (waiting["event_id"], waiting["status"]) == (ping["id"], "pending")
    patched = await client.patch(
        f"/v1/webhook-endpoints/{endpoint['id']}", json={"ordering": "unordered"}
    )
    assert patched.json()["ordering"] == "unordered"
    assert (await client.get("/v1/webhook-endpoints/we_missing/head")).status_code == 404
    bad = await client.post("/v1/webhook-endpoints", json={"url": HOOK, "ordering": "lifo"})
    assert bad.status_code == 422


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"url": "http://hooks.example.com/x"}, "body.url"),
        ({"url": "https://127.0.0.1/x"}, "body.url"),
        ({"url": "https://[::ffff:10.0.0.1]/x"}, "body.url"),
        ({"url": HOOK, "events": ["payment*"]}, "body.events"),
        ({"url": HOOK, "events": []}, "body.events"),
        ({"url": HOOK, "payload": "fat"}, "body.payload"),
        ({"url": HOOK, "surprise": 1}, "body.surprise"),
    ],
)
async def test_bad_endpoints_are_validation_errors(
    client: httpx.AsyncClient, payload: dict[str, Any], field: str
) -> None:
    got = await client.post("/v1/webhook-endpoints", json=payload)
    assert got.status_code == 422
    assert got.headers["content-type"] == "application/problem+json"
    problem = got.json()
    assert problem["type"].endswith("/problems/validation-error")
    assert field in [e["field"] for e in problem["errors"]]


async def test_patch_with_if_match_and_disable_logs_an_event(client: httpx.AsyncClient) -> None:
    made = (await client.post("/v1/webhook-endpoints", json={"url": HOOK})).json()
    path = f"/v1/webhook-endpoints/{made['id']}"
    nulled = await client.patch(path, json={"url": None, "max_in_flight": None})
    assert nulled.status_code == 422
    assert [e["field"] for e in nulled.json()["errors"]] == ["body.url", "body.max_in_flight"]
    stale = await client.patch(path, json={"description": "x"}, headers={"if-match": '"9"'})
    assert stale.status_code == 412
    changed = await client.patch(
        path, json={"events": ["transfer.completed"]}, headers={"if-match": '"1"'}
    )
    assert changed.status_code == 200
    assert changed.headers["etag"] == '"2"'
    assert changed.json()["events"] == ["transfer.completed"]
    off = (await client.patch(path, json={"enabled": False})).json()
    assert off["enabled"] is False
    assert off["disabled_reason"] == "disabled by request"
    logged = (await client.get("/v1/events", params={"type": "endpoint.disabled"})).json()
    assert [e["data"]["id"] for e in logged["data"]] == [made["id"]]
    on = (await client.patch(path, json={"enabled": True})).json()
    assert on["enabled"] is True
    assert on["disabled_reason"] is None
    assert (await client.delete(path)).status_code == 204
    assert (await client.get(path)).status_code == 404


async def test_every_write_changes_the_etag_and_stales_the_old_one(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/v1/webhook-endpoints", json={"url": HOOK})
    path, tag = made.headers["location"], made.headers["etag"]
    seen = [tag]
    for write in (
        lambda t: client.post(f"{path}/rotate-secret"),
        lambda t: client.patch(path, json={"enabled": False}, headers={"if-match": t}),
        lambda t: client.patch(path, json={"enabled": False}, headers={"if-match": t}),
        lambda t: client.patch(path, json={"enabled": True}, headers={"if-match": t}),
        lambda t: client.patch(path, json={"description": "d"}),
    ):
        answer = await write(seen[-1])
        assert answer.status_code == 200, answer.text
        assert answer.headers["etag"] not in seen
        seen.append(answer.headers["etag"])
    assert (await client.get(path)).headers["etag"] == seen[-1]
    stale = await client.delete(path, headers={"if-match": seen[-2]})
    assert stale.status_code == 412
    assert stale.json()["type"].endswith("/problems/precondition-failed")
    logged = (await client.get("/v1/events", params={"type": "endpoint.disabled"})).json()
    assert [e["data"]["id"] for e in logged["data"]].count(made.json()["id"]) == 1
    assert (await client.delete(path, headers={"if-match": seen[-1]})).status_code == 204


async def test_event_types_catalogue(client: httpx.AsyncClient) -> None:
    types = (await client.get("/v1/event-types")).json()["data"]
    names = {t["name"] for t in types}
    assert {"payment.created", "payment.succeeded", "transfer.completed", "ping"} <= names
    assert all(t["schema"]["type"] == "object" for t in types)


async def test_other_accounts_see_nothing(
    client: httpx.AsyncClient, settings: Settings, db: Database
) -> None:
    from ustun.service.plumbing.accounts import create_key

    made = (await client.post("/v1/webhook-endpoints", json={"url": HOOK})).json()
    other = await create_key(db, "other-" + made["id"][-8:])
    headers = {"authorization": f"Bearer {other}"}
    assert (
        await client.get(f"/v1/webhook-endpoints/{made['id']}", headers=headers)
    ).status_code == 404
    assert (await client.get("/v1/webhook-endpoints", headers=headers)).json()["data"] == []


@dataclass
class Live:
    client: httpx.AsyncClient
    url: str
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    replies: list[int] = field(default_factory=list)


@pytest.fixture
async def live(settings: Settings, db: Database, api_key: str) -> AsyncIterator[Live]:
    """An app with the embedded worker, private addresses allowed, and a local receiver."""
    port = free_port()
    received: list[tuple[dict[str, str], bytes]] = []
    replies: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(status=replies.pop(0) if replies else 204)

    receiver = web.Application()
    receiver.router.add_post("/hook", handle)
    runner = web.AppRunner(receiver)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with serving(settings, db, api_key) as http:
            yield Live(http, f"http://127.0.0.1:{port}/hook", received, replies)
    finally:
        await runner.cleanup()


async def test_ping_rotate_retry_recover(live: Live) -> None:
    client = live.client
    made = (await client.post("/v1/webhook-endpoints", json={"url": live.url})).json()
    base = f"/v1/webhook-endpoints/{made['id']}"

    ping = await client.post(f"{base}/test")
    assert ping.status_code == 202
    assert ping.json()["type"] == "ping"
    deliveries = await _wait(
        client,
        f"/v1/deliveries?event_id={ping.json()['id']}",
        lambda b: b["data"] and b["data"][0]["status"] == "succeeded",
        "the ping to be delivered",
    )
    delivery_id = deliveries["data"][0]["id"]
    one = (await client.get(f"/v1/deliveries/{delivery_id}")).json()
    assert one["attempt_count"] == 1
    assert one["attempts"][0]["status_code"] == 204
    assert one["next_attempt_at"] is None
    headers, body = live.received[-1]
    verify(made["secret"], headers, body)

    rotated = (await client.post(f"{base}/rotate-secret")).json()
    assert rotated["secret"] != made["secret"]
    again = await client.post(f"/v1/deliveries/{delivery_id}/retry")
    assert again.status_code == 202
    await _wait(
        client,
        f"/v1/deliveries/{delivery_id}",
        lambda b: b["status"] == "succeeded" and b["attempt_count"] == 2,
        "the manual retry",
    )
    headers, body = live.received[-1]
    assert len(headers["webhook-signature"].split(" ")) == 2
    verify(made["secret"], headers, body)
    verify(rotated["secret"], headers, body)
    events = (await client.get("/v1/events")).json()["data"]
    assert (await client.get(f"/v1/events/{events[0]['id']}")).json()["type"] == "ping"


async def test_dead_deliveries_are_recovered(live: Live) -> None:
    client = live.client
    made = (await client.post("/v1/webhook-endpoints", json={"url": live.url})).json()
    live.replies.extend([500, 500, 500])
    ping = (await client.post(f"/v1/webhook-endpoints/{made['id']}/test")).json()
    dead = await _wait(
        client,
        f"/v1/deliveries?event_id={ping['id']}&status=dead",
        lambda b: b["data"],
        "the delivery to die after 1 + 2 attempts",
    )
    assert dead["data"][0]["attempt_count"] == 3
    recovered = await client.post(
        f"/v1/webhook-endpoints/{made['id']}/recover", json={"since": "2000-01-01T00:00:00Z"}
    )
    assert recovered.status_code == 202
    assert recovered.json()["recovered"] == 1
    await _wait(
        client,
        f"/v1/deliveries/{dead['data'][0]['id']}",
        lambda b: b["status"] == "succeeded" and b["attempt_count"] == 4,
        "the recovered delivery",
    )
