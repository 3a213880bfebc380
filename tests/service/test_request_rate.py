"""Each account's request rate (issue 27): a token bucket per account in each server process.

B's 1,000 connections of cheap GETs made A's p50 about 0.8 s and B never got a 429. Now an
account past its burst gets 429 `rate-limited` with `Retry-After` and the RateLimit fields of
draft-ietf-httpapi-ratelimit-headers-11, and runs nothing; another account keeps its own bucket.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from starlette.responses import Response

from ustun.service import create_app
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.service.plumbing.admission import RequestRate
from ustun.service.resources.schema import payments
from ustun.settings import Settings
from ustun.store import Database

BURST = 3
RATE = 0.5  # a token every 2 s: none comes back while a test runs its burst


@pytest.fixture
async def app(settings: Settings, db: Database) -> AsyncIterator[FastAPI]:
    """The service with a burst of three requests per account and a token every 2 s."""
    limited = create_app(
        settings.model_copy(update={"rate_limit": RATE, "rate_burst": BURST}), db=db
    )
    async with limited.router.lifespan_context(limited):
        yield limited


def _client(app: FastAPI, key: str | None) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver", headers=headers
    )


async def test_past_its_burst_an_account_gets_429_with_the_ratelimit_fields(
    app: FastAPI, db: Database, api_key: str
) -> None:
    async with _client(app, api_key) as client:
        for left in range(BURST - 1, -1, -1):
            answer = await client.get("/v1/payments")
            assert answer.status_code == 200, answer.text
            assert answer.headers["ratelimit-policy"] == '"default";q=3;w=6'
            assert answer.headers["ratelimit"] == f'"default";r={left};t=2'
        refused = await client.post(
            "/v1/payments",
            json={"amount": 100, "currency": "EUR"},
            headers={"idempotency-key": uuid.uuid4().hex},
        )
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"] == "http://testserver/problems/rate-limited"
    assert "0.5 requests a second, in bursts of at most 3" in refused.json()["detail"]
    assert refused.headers["retry-after"] == "2"
    assert refused.headers["ratelimit"] == '"default";r=0;t=2'
    assert refused.headers["ratelimit-policy"] == '"default";q=3;w=6'
    assert refused.headers["x-request-id"].startswith("req_")
    account = await account_for_key(db, api_key)
    assert account is not None
    async with db.read() as conn:
        made = await conn.scalar(
            select(func.count()).select_from(payments).where(payments.c.account_id == account.id)
        )
    assert made == 0  # the refused POST ran nothing


async def test_another_account_keeps_its_own_bucket(
    app: FastAPI, db: Database, api_key: str
) -> None:
    other = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    async with _client(app, api_key) as flooder, _client(app, other) as neighbour:
        for _ in range(BURST + 2):
            await flooder.get("/v1/payments")
        assert (await flooder.get("/v1/payments")).status_code == 429
        answer = await neighbour.get("/v1/payments")
    assert answer.status_code == 200
    assert answer.headers["ratelimit"] == '"default";r=2;t=2'


async def test_unauthenticated_requests_and_routes_outside_the_api_are_not_counted(
    app: FastAPI, api_key: str
) -> None:
    async with _client(app, None) as anonymous, _client(app, api_key) as client:
        for _ in range(BURST + 1):
            assert (await anonymous.get("/v1/payments")).status_code == 401
            health = await client.get("/healthz")
            assert health.status_code == 200
            assert "ratelimit" not in health.headers
        assert (await client.get("/v1/payments")).headers["ratelimit"] == '"default";r=2;t=2'


async def test_a_rate_limit_of_zero_limits_nothing(
    settings: Settings, db: Database, api_key: str
) -> None:
    unlimited = create_app(settings.model_copy(update={"rate_limit": 0, "rate_burst": 1}), db=db)
    async with unlimited.router.lifespan_context(unlimited), _client(unlimited, api_key) as client:
        for _ in range(3):
            answer = await client.get("/v1/payments")
            assert answer.status_code == 200
            assert "ratelimit" not in answer.headers


def _call(rate: RequestRate, account: str) -> int:
    scope = {"type": "http", "method": "GET", "path": "/v1/payments", "headers": []}
    checked = rate.check(scope, account)
    return checked.status_code if isinstance(checked, Response) else 200


def test_past_max_buckets_only_full_ones_are_forgotten() -> None:
    """Forgetting a bucket that is not full would hand its account a fresh burst."""
    now = [0.0]
    rate = RequestRate(rate=1, burst=2, max_buckets=2, clock=lambda: now[0])
    assert [_call(rate, "busy") for _ in range(3)] == [200, 200, 429]
    assert _call(rate, "idle") == 200
    now[0] = 0.5  # idle holds 1.5 tokens, busy 0.5: neither is full, both are kept
    assert _call(rate, "new") == 200
    assert set(rate._buckets) == {"busy", "idle", "new"}
    now[0] = 1.0  # idle is full again (2 tokens); busy holds 1, new 1.5
    assert _call(rate, "newer") == 200
    assert set(rate._buckets) == {"busy", "new", "newer"}
    assert [_call(rate, "busy") for _ in range(2)] == [200, 429]
