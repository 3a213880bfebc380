"""Every body the service sends, full and thin, matches the schema both event documents publish.

The service runs with its embedded worker; its dispatcher delivers to a real local receiver;
each received body is validated with `jsonschema` against the schema `/openapi.json`
(`webhooks`) and `/asyncapi.json` (the channel's message) reference for its type.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.protocols import Validator
from referencing.jsonschema import DRAFT7, DRAFT202012

from support import schema_validators
from ustun import jobs
from ustun.service.plumbing.accounts import account_for_key
from ustun.service.specs.event_types import CATALOGUE
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.operational import OPT_IN
from webhook_support import Receiver, serving, until

# The in-process client's own base: a thin payload's URL is then one it can follow.
PUBLIC_URL = "http://testserver"


@dataclass
class Running:
    client: httpx.AsyncClient
    db: Database
    receiver: Receiver
    account_id: str


@pytest.fixture
async def running(settings: Settings, db: Database, api_key: str) -> AsyncIterator[Running]:
    account = await account_for_key(db, api_key)
    assert account is not None
    receiver = await Receiver().start()
    try:
        async with serving(
            settings, db, api_key, public_url=PUBLIC_URL, job_poll_interval=0.1
        ) as client:
            yield Running(client, db, receiver, account.id)
    finally:
        await receiver.stop()


async def _schemas(client: httpx.AsyncClient) -> dict[str, list[Validator]]:
    """For each event type, a validator for the body schema each document refers to."""
    openapi = (await client.get("/openapi.json")).json()
    asyncapi = (await client.get("/asyncapi.json")).json()
    in_openapi = schema_validators(openapi, DRAFT202012, Draft202012Validator)
    in_asyncapi = schema_validators(asyncapi, DRAFT7, Draft7Validator)
    by_type: dict[str, list[Validator]] = {}
    for name, hook in openapi["webhooks"].items():
        schema = hook["post"]["requestBody"]["content"]["application/json"]["schema"]
        by_type[name] = [in_openapi(schema["$ref"])]
    messages = asyncapi["components"]["messages"]
    for channel in asyncapi["channels"].values():
        (message,) = channel["messages"].values()
        payload = messages[message["$ref"].rsplit("/", 1)[1]]["payload"]
        by_type[channel["title"]].append(in_asyncapi(payload["$ref"]))
    return by_type


async def _emit_every_event_type(run: Running, endpoint_ids: list[str]) -> None:
    """Drive the service through its API (and its job queue) to emit every type it knows."""
    client = run.client
    for n, status in enumerate(("succeeded", "failed", "cancelled")):
        made = await client.post(
            "/v1/payments",
            json={"amount": 100 + n, "currency": "EUR", "description": "Ünïcode"},
            headers={"idempotency-key": f"payload-pay-{n}"},
        )
        assert made.status_code == 201, made.text
        changed = await client.patch(
            made.headers["location"],
            json={"status": status},
            headers={"if-match": made.headers["etag"]},
        )
        assert changed.status_code == 200, changed.text
    a = (await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 100})).json()
    b = (await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 0})).json()
    moved = await client.post(
        "/v1/transfers",
        json={"from": a["id"], "to": b["id"], "amount": 60, "currency": "EUR"},
        headers={"idempotency-key": "payload-tr"},
    )
    assert moved.status_code == 201, moved.text
    report = await client.post("/v1/reports", json={"period": "2026", "format": "json"})
    assert report.status_code == 202, report.text
    await jobs.enqueue(run.db, "broken", account_id=run.account_id)
    for endpoint_id in endpoint_ids:
        assert (await client.post(f"/v1/webhook-endpoints/{endpoint_id}/test")).status_code == 202
    other = await client.post(
        "/v1/webhook-endpoints", json={"url": run.receiver.url("/other"), "events": ["ping"]}
    )
    off = await client.patch(f"/v1/webhook-endpoints/{other.json()['id']}", json={"enabled": False})
    assert off.status_code == 200, off.text


async def test_every_body_sent_full_or_thin_matches_both_documents(running: Running) -> None:
    client, receiver = running.client, running.receiver
    endpoint_ids = []
    for form in ("full", "thin"):
        made = await client.post(
            "/v1/webhook-endpoints", json={"url": receiver.url(f"/{form}"), "payload": form}
        )
        assert made.status_code == 201, made.text
        endpoint_ids.append(made.json()["id"])
    await _emit_every_event_type(running, endpoint_ids)

    # `*` leaves out the opt-in operational events (tests/webhooks/test_operational_events.py).
    sent = [t for t in CATALOGUE if t.name not in OPT_IN]
    wanted = {(f"/{form}", t.name) for form in ("full", "thin") for t in sent}

    async def all_arrived() -> bool:
        seen = {(r.path, json.loads(r.body)["type"]) for r in receiver.received}
        return seen >= wanted

    await until(all_arrived, within=30, what="every event type at both endpoints")
    validators = await _schemas(client)
    for received in receiver.received:
        body = json.loads(received.body)
        for validator in validators[body["type"]]:
            errors = [e.message for e in validator.iter_errors(body)]
            assert errors == [], (received.path, body)

    thin_able = {t.name for t in CATALOGUE if t.thin}
    full = [json.loads(r.body) for r in receiver.received if r.path == "/full"]
    thin = [json.loads(r.body) for r in receiver.received if r.path == "/thin"]
    assert all(set(b["data"]) != {"id", "url"} for b in full)
    for body in thin:
        if body["type"] not in thin_able:
            assert set(body["data"]) != {"id", "url"}, body  # no object: sent in full
            continue
        assert set(body["data"]) == {"id", "url"}, body
        assert body["data"]["url"].startswith(f"{PUBLIC_URL}/v1/"), body
        followed = await client.get(body["data"]["url"])  # absolute: usable as it is
        assert followed.status_code == 200, body
        assert followed.json()["id"] == body["data"]["id"]
