"""The limiter of failed authentications throttles failures, never valid credentials: past its
limit, an address's wrong keys get 429, and every valid key from it still works (issue 28: a
NAT'd office was locked out for a minute by one client's bad key)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from fastapi import FastAPI

from dashboard_support import csrf_of
from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database

LIMIT = 3
WRONG = {"authorization": "Bearer ustun_sk_guess"}


@pytest.fixture
def app(settings: Settings, db: Database) -> FastAPI:
    """The service with three failed checks allowed per address and minute."""
    return create_app(settings.model_copy(update={"auth_failure_limit": LIMIT}), db=db)


def _from(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 4321))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_past_the_limit_a_valid_key_passes_and_a_wrong_one_gets_429(
    app: FastAPI, db: Database, api_key: str
) -> None:
    colleague = await create_key(db, f"colleague-{uuid.uuid4().hex[:8]}")
    async with _from(app, "203.0.113.20") as office:
        for _ in range(LIMIT):
            assert (await office.get("/v1/payments", headers=WRONG)).status_code == 401
        assert (await office.get("/v1/payments", headers=WRONG)).status_code == 429
        # Keys this process has never seen (no cache to lean on): checked, and let through.
        for key in (api_key, colleague):
            assert (await office.get("/v1/payments", headers=_bearer(key))).status_code == 200
        # They counted nothing and cleared nothing: the next wrong key is still throttled.
        refused = await office.get("/v1/payments", headers=WRONG)
        assert refused.status_code == 429
        assert refused.json()["type"] == "http://testserver/problems/rate-limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 60


async def test_valid_requests_do_not_count_as_failures(app: FastAPI, api_key: str) -> None:
    async with _from(app, "203.0.113.21") as client:
        for _ in range(LIMIT - 1):
            assert (await client.get("/v1/payments", headers=WRONG)).status_code == 401
            for _ in range(3):
                ok = await client.get("/v1/payments", headers=_bearer(api_key))
                assert ok.status_code == 200
        assert (await client.get("/v1/payments", headers=WRONG)).status_code == 401
        assert (await client.get("/v1/payments", headers=WRONG)).status_code == 429


async def test_past_the_limit_a_valid_key_still_logs_in_to_the_dashboard(
    app: FastAPI, api_key: str
) -> None:
    async with _from(app, "203.0.113.22") as browser:
        csrf = csrf_of((await browser.get("/dashboard/login")).text)

        def login(key: str) -> dict[str, str]:
            return {"api_key": key, "csrf_token": csrf}

        for _ in range(LIMIT):
            wrong = await browser.post("/dashboard/login", data=login("ustun_sk_guess"))
            assert wrong.status_code == 200
            assert "not valid" in wrong.text
        refused = await browser.post("/dashboard/login", data=login("ustun_sk_guess"))
        assert refused.status_code == 429
        assert refused.json()["type"].endswith("/problems/rate-limited")
        logged_in = await browser.post("/dashboard/login", data=login(api_key))
        assert logged_in.status_code == 303
        assert logged_in.headers["location"] == "/dashboard"
