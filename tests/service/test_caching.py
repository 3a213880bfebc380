"""`Cache-Control` on every /v1 response: reuse only after revalidation (RFC 9111 §5.2.2.4)."""

from __future__ import annotations

import httpx

from ustun import jobs
from ustun.service.plumbing.accounts import account_for_key
from ustun.service.plumbing.response_headers import API_CACHE_CONTROL
from ustun.store import Database


async def test_every_v1_answer_forbids_reuse_without_revalidation(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account = await account_for_key(db, api_key)
    assert account is not None
    job = await jobs.enqueue(db, "slow", account_id=account.id)
    made = await client.post(
        "/v1/payments", json={"amount": 100, "currency": "EUR"}, headers={"idempotency-key": "c1"}
    )
    url = made.headers["location"]
    answers = {
        "201": made,
        "200": await client.get(url),
        "304": await client.get(url, headers={"if-none-match": made.headers["etag"]}),
        "202": await client.post("/v1/reports", json={"period": "2026", "format": "csv"}),
        "400": await client.get(
            f"/v1/jobs/{job.id}/events", headers={"last-event-id": "9223372036854775808"}
        ),
        "401": await client.get(url, headers={"authorization": "Bearer nope"}),
        "404": await client.get("/v1/payments/pay_missing"),
        "405": await client.delete("/v1/payments"),
        "412": await client.get(url, headers={"if-match": '"99"'}),
        "422": await client.get("/v1/payments", params={"limit": 0}),
    }
    for status, answer in answers.items():
        assert str(answer.status_code) == status, answer.text
        assert answer.headers["cache-control"] == API_CACHE_CONTROL, status
    await jobs.cancel(db, job.id, account_id=account.id)


async def test_a_response_keeps_its_own_cache_control(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    made = await client.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/h"})
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"  # it shows the signing secret
    account = await account_for_key(db, api_key)
    assert account is not None
    job = await jobs.enqueue(db, "slow", account_id=account.id)
    await jobs.cancel(db, job.id, account_id=account.id)
    stream = await client.get(f"/v1/jobs/{job.id}/events")  # the stream sets `no-cache` itself
    assert stream.headers["cache-control"] == "no-cache"


async def test_outside_v1_nothing_is_added(client: httpx.AsyncClient) -> None:
    assert "cache-control" not in (await client.get("/healthz")).headers
