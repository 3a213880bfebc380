import uuid

import httpx
import pytest
from fastapi import FastAPI

from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database


@pytest.fixture
async def anonymous(settings: Settings, db: Database) -> httpx.AsyncClient:
    app = create_app(settings, db=db)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer ustun_sk_not-a-real-key",
        "Token x",
    ],
)
async def test_missing_or_bad_credentials_are_401_problems(
    anonymous: httpx.AsyncClient, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    response = await anonymous.get("/v1/payments", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert body["type"] == "http://testserver/problems/unauthorized"
    assert body["status"] == 401
    assert body["instance"] == f"urn:ustun:request:{response.headers['x-request-id']}"


async def test_valid_key_reaches_the_api(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/payments")
    assert response.status_code == 200
    assert response.json() == {"data": [], "next_cursor": None}


async def test_scheme_is_case_insensitive(anonymous: httpx.AsyncClient, api_key: str) -> None:
    response = await anonymous.get("/v1/payments", headers={"authorization": f"bearer {api_key}"})
    assert response.status_code == 200


async def test_public_routes_need_no_key(anonymous: httpx.AsyncClient) -> None:
    assert (await anonymous.get("/healthz")).status_code == 200
    assert (await anonymous.get("/readyz")).json() == {"status": "ready"}
    assert (await anonymous.get("/problems/unauthorized")).status_code == 200


@pytest.fixture
def strict_settings(settings: Settings) -> Settings:
    """Three failed checks per address and minute."""
    return settings.model_copy(update={"auth_failure_limit": 3})


def _from(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 4321))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def test_failed_bearer_checks_from_one_address_get_429(
    strict_settings: Settings, db: Database, api_key: str
) -> None:
    app = create_app(strict_settings, db=db)
    spare = await create_key(db, f"spare-{uuid.uuid4().hex[:8]}")
    good, fresh, wrong = (
        {"authorization": f"Bearer {k}"} for k in (api_key, spare, "ustun_sk_guess")
    )
    async with _from(app, "203.0.113.7") as guesser, _from(app, "198.51.100.1") as bystander:
        assert (await guesser.get("/v1/payments", headers=good)).status_code == 200
        for _ in range(3):
            assert (await guesser.get("/v1/payments", headers=wrong)).status_code == 401

        refused = await guesser.get("/v1/payments", headers=wrong)
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"] == "http://testserver/problems/rate-limited"
        assert refused.json()["title"] == "Too many requests"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        # Only failures are throttled, never a valid key: tests/service/test_auth_limiter.py.
        assert (await guesser.get("/v1/payments", headers=good)).status_code == 200
        # Other addresses are not affected.
        assert (await bystander.get("/v1/payments", headers=fresh)).status_code == 200
        assert (await bystander.get("/v1/payments", headers=wrong)).status_code == 401


async def test_requests_without_a_key_do_not_count(
    strict_settings: Settings, db: Database, api_key: str
) -> None:
    app = create_app(strict_settings, db=db)
    async with _from(app, "203.0.113.8") as anonymous:
        for _ in range(5):
            assert (await anonymous.get("/v1/payments")).status_code == 401
        good = {"authorization": f"Bearer {api_key}"}
        assert (await anonymous.get("/v1/payments", headers=good)).status_code == 200
