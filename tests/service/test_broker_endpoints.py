"""`POST /v1/webhook-endpoints` for broker destinations: the body each kind needs, the SSRF rules
of webhook URLs applied to broker hosts, and the shape of the endpoint it answers with."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from dashboard_support import log_in
from ustun.settings import Settings
from ustun.store import Database
from webhook_support import serving

AMQP = {"kind": "rabbitmq", "url": "amqps://user:pw@broker.example.com/", "exchange": "events"}
JETSTREAM = {"kind": "nats", "url": "tls://broker.example.com:4222", "subject": "ustun.events"}


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({**AMQP, "exchange": None}, "body", "a rabbitmq endpoint needs `exchange`"),
        ({**JETSTREAM, "subject": None}, "body", "a nats endpoint needs `subject`"),
        ({**AMQP, "subject": "x"}, "body", "`subject` is only for a nats endpoint"),
        ({"url": "https://hooks.example.com/", "exchange": "x"}, "body", "only for a rabbitmq"),
        ({**AMQP, "kind": "kafka"}, "body.kind", "'http', 'rabbitmq' or 'nats'"),
        ({**AMQP, "url": "nats://broker.example.com"}, "body.url", "amqp:// or amqps://"),
        ({**JETSTREAM, "subject": "events.>"}, "body.subject", "without spaces or wildcards"),
        ({**AMQP, "exchange": "two words"}, "body.exchange", "the exchange must be"),
        ({**AMQP, "url": "amqps://guest:guest@127.0.0.1:5671/"}, "body.url", "loopback address"),
        ({**JETSTREAM, "url": "tls://10.1.2.3:4222"}, "body.url", "private address"),
        ({**JETSTREAM, "url": "tls://localhost"}, "body.url", "loopback name"),
        ({**AMQP, "url": "amqp://u:p@broker.example.com/"}, "body.url", "must use amqps:// (TLS)"),
        ({**JETSTREAM, "url": "nats://broker.example.com"}, "body.url", "must use tls:// (TLS)"),
    ],
)
async def test_a_refused_broker_endpoint_is_a_422_that_says_why(
    client: httpx.AsyncClient, body: dict[str, Any], field: str, says: str
) -> None:
    refused = await client.post("/v1/webhook-endpoints", json=body)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["type"].endswith("/validation-error")
    assert [e["field"] for e in problem["errors"]] == [field]
    assert says in problem["errors"][0]["message"]
    assert "guest:guest" not in refused.text


async def test_allowing_private_addresses_allows_loopback_brokers(
    settings: Settings, db: Database, api_key: str
) -> None:
    async with serving(settings, db, api_key) as allowing:  # USTUN_WEBHOOK_ALLOW_PRIVATE=1
        for body in (
            {**AMQP, "url": "amqp://guest:guest@127.0.0.1:5672/"},
            {**JETSTREAM, "url": "nats://localhost:4222"},
        ):
            made = await allowing.post("/v1/webhook-endpoints", json=body)
            assert made.status_code == 201, made.text


async def test_a_broker_endpoint_shows_its_kind_and_destination_and_changes_like_any(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/v1/webhook-endpoints", json={**JETSTREAM, "events": ["payment.*"]})
    assert made.status_code == 201, made.text
    shown = made.json()
    assert {k: shown[k] for k in ("kind", "url", "exchange", "subject", "events")} == {
        "kind": "nats",
        "url": "tls://broker.example.com:4222",
        "exchange": None,
        "subject": "ustun.events",
        "events": ["payment.*"],
    }
    assert shown["secret"].startswith("whsec_")
    path = made.headers["location"]
    wrong = await client.patch(
        path, json={"exchange": "x"}, headers={"if-match": made.headers["etag"]}
    )
    assert wrong.status_code == 422, wrong.text
    assert wrong.json()["errors"][0]["field"] == "body.exchange"
    renamed = await client.patch(
        path, json={"subject": "ustun.other"}, headers={"if-match": made.headers["etag"]}
    )
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["subject"] == "ustun.other"
    stale = await client.patch(path, json={"enabled": False}, headers={"if-match": '"1"'})
    assert stale.status_code == 412
    rotated = await client.post(f"{path}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.json()["kind"] == "nats"
    plain = (await client.post("/v1/webhook-endpoints", json={"url": "https://h.example/"})).json()
    assert (plain["kind"], plain["exchange"], plain["subject"]) == ("http", None, None)
    assert (
        await client.delete(path, headers={"if-match": rotated.headers["etag"]})
    ).status_code == 204


async def test_the_dashboard_shows_a_broker_endpoint_without_its_credentials(
    client: httpx.AsyncClient, api_key: str
) -> None:
    made = (await client.post("/v1/webhook-endpoints", json=AMQP)).json()
    csrf = await log_in(client, api_key)
    assert csrf
    for page in ("/dashboard/endpoints", f"/dashboard/endpoints/{made['id']}"):
        shown = await client.get(page)
        assert shown.status_code == 200, shown.text
        assert "rabbitmq" in shown.text
        assert "amqps://broker.example.com/" in shown.text
        assert "<code>events</code>" in shown.text
        assert "user:pw" not in shown.text
