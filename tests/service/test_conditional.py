"""A 304 carries every header the 200 would (RFC 9110 §15.4.5), on each conditional GET."""

from __future__ import annotations

import httpx
import pytest

from ustun import jobs
from ustun.service.plumbing.accounts import account_for_key
from ustun.store import Database

# What only a response with content has, and what differs between any two responses.
# Besides the body's own headers, RateLimit: its count of requests left moves between the two.
CONTENT = {"content-type", "content-length", "x-request-id", "date", "ratelimit"}


async def _resource(kind: str, client: httpx.AsyncClient, db: Database, api_key: str) -> str:
    if kind == "job":
        account = await account_for_key(db, api_key)
        assert account is not None
        job = await jobs.enqueue(db, "slow", account_id=account.id)
        return f"/v1/jobs/{job.id}"
    made = {
        "payment": lambda: client.post(
            "/v1/payments",
            json={"amount": 100, "currency": "EUR"},
            headers={"idempotency-key": "parity"},
        ),
        "document": lambda: client.post("/v1/documents", json={"title": "t", "body": "b"}),
        "ledger account": lambda: client.post(
            "/v1/ledger-accounts", json={"currency": "EUR", "balance": 10}
        ),
        "webhook endpoint": lambda: client.post(
            "/v1/webhook-endpoints", json={"url": "https://example.com/hook"}
        ),
    }[kind]
    response = await made()
    assert response.status_code == 201, response.text
    return response.headers["location"]


@pytest.mark.parametrize(
    "kind", ["payment", "document", "ledger account", "webhook endpoint", "job"]
)
async def test_304_and_200_carry_the_same_headers(
    kind: str, client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    url = await _resource(kind, client, db, api_key)
    for method in ("GET", "HEAD"):
        full = await client.request(method, url)
        assert full.status_code == 200
        # A ledger account has no modification time; the others have one.
        assert ("last-modified" in full.headers) is (kind != "ledger account")
        same = await client.request(method, url, headers={"if-none-match": full.headers["etag"]})
        assert same.status_code == 304
        assert same.content == b""
        kept = {k: v for k, v in full.headers.items() if k not in CONTENT}
        assert {k: v for k, v in same.headers.items() if k not in CONTENT} == kept, method
    if kind == "job":  # pending: pollers are asked to wait, by the 304 as by the 200
        assert "retry-after" in kept
        assert (await client.post(f"{url}/cancel")).status_code == 200
