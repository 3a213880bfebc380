"""What a broker endpoint may not name, on create and on PATCH (issue 26, items 7 and 10): URL
query options the client would act on against this server (read its files, decode values,
stop verifying TLS), and the exchanges and subjects of the broker itself, which a tenant
sharing it could turn against others (`$JS.API.STREAM.PURGE.…` empties another's stream)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

# Public addresses by number, so no check waits on a DNS answer.
AMQP = {"kind": "rabbitmq", "url": "amqps://relay:pw@8.8.8.8/vh", "exchange": "events"}
NATS = {"kind": "nats", "url": "tls://relay:pw@8.8.4.4:4222", "subject": "ustun.events"}
BODIES = {"rabbitmq": AMQP, "nats": NATS}

REFUSED_OPTIONS = [
    ("rabbitmq", "?cafile=/etc/passwd", "cafile"),
    ("rabbitmq", "?capath=/etc", "capath"),
    ("rabbitmq", "?certfile=/etc/ssl/certs/ca-certificates.crt", "certfile"),
    ("rabbitmq", "?keyfile=/etc/shadow", "keyfile"),
    ("rabbitmq", "?cadata=abc", "cadata"),
    ("rabbitmq", "?no_verify_ssl=1", "no_verify_ssl"),
    ("rabbitmq", "?auth=external", "auth"),
    ("rabbitmq", "?timeout=1", "timeout"),
    ("rabbitmq", "?happy_eyeballs_delay=x", "happy_eyeballs_delay"),
    ("rabbitmq", "?interleave=x", "interleave"),
    ("rabbitmq", "?heartbeat=30&caf%69le=/etc/passwd", "cafile"),
    ("rabbitmq", "?heartbeat=soon", "heartbeat"),
    ("rabbitmq", "#cafile=/etc/passwd", "fragment"),
    ("nats", "?cafile=/etc/passwd", "cafile"),
    ("nats", "?heartbeat=30", "heartbeat"),
]
REFUSED_NAMES = [
    ("nats", "$JS.API.STREAM.PURGE.orders"),
    ("nats", "$JS.API.STREAM.DELETE.orders"),
    ("nats", "$JS.API.CONSUMER.DELETE.orders.payments"),
    ("nats", "$SYS.REQ.SERVER.PING"),
    ("nats", "$KV.config.key"),
    ("nats", "$O.bucket.chunk"),
    ("nats", "_INBOX.abc.def"),
    ("nats", "orders.*"),
    ("nats", "orders.>"),
    ("nats", ">"),
    ("rabbitmq", "amq.topic"),
    ("rabbitmq", "amq.direct"),
    ("rabbitmq", "amq.rabbitmq.trace"),
]


def _refused(answer: httpx.Response, field: str, says: str) -> None:
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/validation-error")
    assert [e["field"] for e in problem["errors"]] == [field]
    assert says in problem["errors"][0]["message"]
    assert "relay:pw" not in answer.text


async def _made(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    made = await client.post("/v1/webhook-endpoints", json=body)
    assert made.status_code == 201, made.text
    return str(made.headers["location"])


@pytest.mark.parametrize(("kind", "suffix", "option"), REFUSED_OPTIONS)
async def test_a_url_option_off_the_allow_list_is_refused_by_name(
    client: httpx.AsyncClient, kind: str, suffix: str, option: str
) -> None:
    body = BODIES[kind]
    url = body["url"] + suffix
    _refused(
        await client.post("/v1/webhook-endpoints", json={**body, "url": url}), "body.url", option
    )
    path = await _made(client, body)
    changed = await client.patch(path, json={"url": url}, headers={"if-match": "*"})
    _refused(changed, "body.url", option)


async def test_the_allowed_options_are_accepted(client: httpx.AsyncClient) -> None:
    url = AMQP["url"] + "?heartbeat=30&name=relay%20one"
    path = await _made(client, {**AMQP, "url": url})
    assert (await client.get(path)).json()["url"] == url.replace("relay:pw@", "")


@pytest.mark.parametrize(("kind", "name"), REFUSED_NAMES)
async def test_the_brokers_own_exchanges_and_subjects_are_refused(
    client: httpx.AsyncClient, kind: str, name: str
) -> None:
    body = BODIES[kind]
    field = "exchange" if kind == "rabbitmq" else "subject"
    says = f"the {field} must"
    _refused(
        await client.post("/v1/webhook-endpoints", json={**body, field: name}),
        f"body.{field}",
        says,
    )
    path = await _made(client, body)
    changed = await client.patch(path, json={field: name}, headers={"if-match": "*"})
    _refused(changed, f"body.{field}", says)
