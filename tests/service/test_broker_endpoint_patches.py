"""Concurrent PATCHes of one broker endpoint without `If-Match` keep each other's change: one of
its URL and one of its exchange or subject, sent at once, both hold (issue 26, item 3: each
rewrote both from a read taken before the other committed, and one change was lost)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from ustun.service.plumbing.accounts import account_for_key
from ustun.store import Database
from ustun.webhooks import endpoints, operations
from ustun.webhooks.brokers.destinations import redact

ROUNDS = 15
# Public addresses by number: the URLs are checked (and looked up) without a DNS answer.
HOSTS = ("8.8.8.8", "8.8.4.4", "1.1.1.1", "9.9.9.9")
KINDS = {
    "rabbitmq": ("amqps://relay:pw-{round}@{host}:5671/vh", "events.v{round}"),
    "nats": ("tls://relay:pw-{round}@{host}:4222", "ustun.events.v{round}"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_url_and_a_destination_patched_at_once_both_hold(
    kind: str, app: FastAPI, db: Database, api_key: str
) -> None:
    url_form, name_form = KINDS[kind]
    field = operations.DESTINATION_FIELD[kind]
    account = await account_for_key(db, api_key)
    assert account is not None
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    ) as client:
        body = {"kind": kind, "url": url_form.format(round=0, host=HOSTS[0])}
        made = await client.post("/v1/webhook-endpoints", json={**body, field: "events.v0"})
        assert made.status_code == 201, made.text
        path, endpoint_id = made.headers["location"], made.json()["id"]
        for round_ in range(1, ROUNDS + 1):
            url = url_form.format(round=round_, host=HOSTS[round_ % len(HOSTS)])
            name = name_form.format(round=round_)
            answers = await asyncio.gather(
                client.patch(path, json={"url": url}),
                client.patch(path, json={field: name}),
            )
            assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
            shown = (await client.get(path)).json()
            assert (shown["url"], shown[field]) == (redact(url), name), f"round {round_}"
            row = await operations.read_endpoint(db, account.id, endpoint_id)
            sealed = endpoints.destination(app.state.secret_box, row)
            assert sealed is not None
            assert (sealed.url, sealed.name) == (url, name), f"round {round_}"
