import httpx
import pytest

from ustun.service import create_app
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
