"""An endpoint's `mtls` and `oauth2` through the API (both backends): shown without their
secrets, changed and removed by PATCH, refused with a 422 that says why, in the OpenAPI."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trustme

from tls_support import client_pems
from ustun.settings import Settings
from ustun.store import Database
from webhook_support import serving

HOOK = "https://hooks.example.com/ustun"
OAUTH2 = {
    "token_url": "https://auth.example.com/oauth/token",
    "client_id": "ustun-hooks",
    "client_secret": "cs-5f1d9e0a7b",
    "scope": "hooks.write",
}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def mtls(ca: trustme.CA) -> dict[str, str]:
    return client_pems(ca)


async def _create(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/v1/webhook-endpoints", json={"url": HOOK, **body})


def _refusal(answer: httpx.Response, field: str) -> str:
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["type"].endswith("/problems/validation-error")
    [error] = problem["errors"]
    assert error["field"] == field
    return str(error["message"])


async def test_an_endpoint_shows_its_certificate_and_credentials_never_their_secrets(
    client: httpx.AsyncClient, mtls: dict[str, str]
) -> None:
    made = await _create(client, mtls=mtls, oauth2=OAUTH2)
    assert made.status_code == 201, made.text
    shown = made.json()
    assert shown["mtls"]["ca_bundle"] is True
    assert shown["mtls"]["subject"].startswith("OU=Testing cert")
    assert shown["mtls"]["not_after"].endswith("Z")
    assert shown["oauth2"] == {k: v for k, v in OAUTH2.items() if k != "client_secret"}
    answers = [
        made,
        await client.get(made.headers["location"]),
        await client.get("/v1/webhook-endpoints"),
    ]
    for answer in answers:
        assert answer.status_code in (200, 201)
        assert "PRIVATE KEY" not in answer.text
        assert OAUTH2["client_secret"] not in answer.text
    plain = (await _create(client)).json()
    assert plain["mtls"] is None
    assert plain["oauth2"] is None


async def test_patch_adds_changes_and_removes_them(
    client: httpx.AsyncClient, mtls: dict[str, str]
) -> None:
    made = await _create(client)
    path, etag = made.headers["location"], made.headers["etag"]
    added = await client.patch(
        path, json={"mtls": mtls, "oauth2": OAUTH2}, headers={"if-match": etag}
    )
    assert added.status_code == 200, added.text
    assert added.json()["mtls"]["ca_bundle"] is True
    assert added.json()["oauth2"]["client_id"] == "ustun-hooks"
    untouched = await client.patch(
        path, json={"description": "kept"}, headers={"if-match": added.headers["etag"]}
    )
    assert untouched.json()["mtls"] == added.json()["mtls"]
    assert untouched.json()["oauth2"] == added.json()["oauth2"]
    removed = await client.patch(
        path, json={"mtls": None, "oauth2": None}, headers={"if-match": untouched.headers["etag"]}
    )
    assert removed.status_code == 200, removed.text
    assert removed.json()["mtls"] is None
    assert removed.json()["oauth2"] is None


async def test_a_refused_change_changes_nothing(
    client: httpx.AsyncClient, mtls: dict[str, str]
) -> None:
    made = await _create(client, oauth2=OAUTH2)
    path, etag = made.headers["location"], made.headers["etag"]
    bad = await client.patch(
        path, json={"oauth2": {**OAUTH2, "token_url": "ftp://x"}}, headers={"if-match": etag}
    )
    assert "the token URL is refused" in _refusal(bad, "body.oauth2.token_url")
    assert (await client.get(path)).json()["oauth2"] == made.json()["oauth2"]
    assert (await client.get(path)).headers["etag"] == etag


async def test_refusals_say_why(
    client: httpx.AsyncClient, ca: trustme.CA, mtls: dict[str, str]
) -> None:
    other_key = ca.issue_cert("other.example").private_key_pem.bytes().decode()
    cases = [
        ({"mtls": {**mtls, "private_key": other_key}}, "body.mtls", "does not belong"),
        ({"mtls": {**mtls, "certificate": "garbage"}}, "body.mtls", "not PEM certificates"),
        ({"mtls": {**mtls, "extra": 1}}, "body.mtls.extra", "Extra inputs"),
        ({"mtls": {"certificate": mtls["certificate"]}}, "body.mtls.private_key", "Field required"),
        ({"oauth2": {**OAUTH2, "client_secret": ""}}, "body.oauth2.client_secret", "at least 1"),
        ({"oauth2": {**OAUTH2, "scope": "x" * 1025}}, "body.oauth2.scope", "at most 1024"),
        (
            {"oauth2": {**OAUTH2, "token_url": "https://169.254.169.254/token"}},
            "body.oauth2.token_url",
            "link-local",
        ),
        (
            {
                "kind": "rabbitmq",
                "url": "amqps://b.example.com/",
                "exchange": "e",
                "oauth2": OAUTH2,
            },
            "body.oauth2",
            "a rabbitmq endpoint takes no oauth2",
        ),
    ]
    for body, field, words in cases:
        answer = await _create(client, **body)
        assert words in _refusal(answer, field), (body, answer.text)
    assert (await client.get("/v1/webhook-endpoints")).json()["data"] == []


async def test_a_client_certificate_needs_an_https_url_even_where_http_is_allowed(
    settings: Settings, db: Database, api_key: str, mtls: dict[str, str]
) -> None:
    async with serving(settings, db, api_key) as allowing:  # USTUN_WEBHOOK_ALLOW_PRIVATE=1
        answer = await allowing.post(
            "/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/hook", "mtls": mtls}
        )
        assert "needs an https URL" in _refusal(answer, "body.mtls")


async def test_the_openapi_documents_both(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    shown = schemas["WebhookEndpoint"]["properties"]
    assert {"mtls", "oauth2"} <= set(shown)
    assert "client_secret" not in schemas["EndpointOAuth2"]["properties"]
    assert "private_key" not in schemas["EndpointMtls"]["properties"]
    assert "private_key" in schemas["MtlsIn"]["properties"]
