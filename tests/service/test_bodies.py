"""Every route that reads a JSON body: unreadable JSON is 400 `bad-request` saying what and
where, another media type is 415 naming the expected one, and neither writes anything."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from support import problem_of

JSON = "application/json"
MERGE = "application/merge-patch+json"
# Far deeper than any JSON decoder's recursion limit, yet well under USTUN_MAX_BODY.
DEEP = b"[" * 50_000 + b"]" * 50_000
MALFORMED = b'{"title": "x",\n "body": }'
NOT_UTF8 = b'{"title": "\xff"}'


@dataclass(frozen=True)
class Route:
    method: str
    url: str
    preconditions: dict[str, str]
    accepts: tuple[str, ...] = (JSON,)
    keyed: bool = False

    def headers(self, **more: str) -> dict[str, str]:
        """Its preconditions, and a new Idempotency-Key where the route needs one."""
        key = {"idempotency-key": uuid.uuid4().hex} if self.keyed else {}
        return {**self.preconditions, **key, **more}


async def _etag(client: httpx.AsyncClient, url: str) -> str:
    return (await client.get(url)).headers["etag"]


async def _route(client: httpx.AsyncClient, family: str) -> Route:
    """The route of `family`, with whatever resource and headers it needs to reach its body."""
    if family.startswith("payments"):
        made = await client.post(
            "/v1/payments", json={"amount": 5, "currency": "EUR"}, headers={"idempotency-key": "p"}
        )
        url = made.headers["location"]
        if family == "payments POST":
            return Route("POST", "/v1/payments", {}, keyed=True)
        return Route("PATCH", url, {"if-match": await _etag(client, url)}, (JSON, MERGE))
    if family.startswith("documents"):
        url = (await client.post("/v1/documents", json={"title": "t"})).headers["location"]
        tag = {"if-match": await _etag(client, url)}
        return {
            "documents POST": Route("POST", "/v1/documents", {}),
            "documents PUT": Route("PUT", url, tag),
            "documents PATCH": Route("PATCH", url, tag, (MERGE,)),
        }[family]
    if family.startswith("webhook endpoints"):
        body = {"url": "https://example.com/hooks"}
        made = await client.post("/v1/webhook-endpoints", json=body)
        if family == "webhook endpoints POST":
            return Route("POST", "/v1/webhook-endpoints", {})
        url = f"/v1/webhook-endpoints/{made.json()['id']}"
        return Route("PATCH", url, {"if-match": await _etag(client, url)})
    return {
        "ledger accounts": Route("POST", "/v1/ledger-accounts", {}),
        "transfers": Route("POST", "/v1/transfers", {}, keyed=True),
        "reports": Route("POST", "/v1/reports", {}),
    }[family]


async def _state(client: httpx.AsyncClient) -> list[Any]:
    """What a write by any of these routes would change."""
    lists = ("payments", "jobs", "webhook-endpoints", "events")
    return [(await client.get(f"/v1/{name}?limit=100")).json() for name in lists]


FAMILIES = [
    "payments POST",
    "payments PATCH",
    "documents POST",
    "documents PUT",
    "documents PATCH",
    "ledger accounts",
    "transfers",
    "reports",
    "webhook endpoints POST",
    "webhook endpoints PATCH",
]


@pytest.mark.parametrize("family", FAMILIES)
async def test_unreadable_json_is_400_saying_what_and_where(
    client: httpx.AsyncClient, family: str
) -> None:
    route = await _route(client, family)
    before = await _state(client)
    if route.url.startswith("/v1/documents/"):
        document = (await client.get(route.url)).json()

    async def send(body: bytes) -> dict[str, Any]:
        headers = route.headers(**{"content-type": route.accepts[-1]})
        answer = await client.request(route.method, route.url, content=body, headers=headers)
        return problem_of(answer, 400, "bad-request")

    deep = await send(DEEP)
    assert "nested too deeply" in deep["detail"]
    malformed = await send(MALFORMED)
    assert malformed["detail"] == (
        "The body is not valid JSON: Expecting value at line 2, column 10 (character 24)."
    )
    assert (malformed["line"], malformed["column"], malformed["position"]) == (2, 10, 24)
    bad_bytes = await send(NOT_UTF8)
    assert "not valid UTF-8: byte 11" in bad_bytes["detail"]
    assert await _state(client) == before
    if route.url.startswith("/v1/documents/"):
        assert (await client.get(route.url)).json() == document


@pytest.mark.parametrize("family", FAMILIES)
async def test_another_media_type_is_415_naming_the_expected_one(
    client: httpx.AsyncClient, family: str
) -> None:
    route = await _route(client, family)
    before = await _state(client)
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        media = {"content-type": content_type} if content_type else {}
        answer = await client.request(
            route.method, route.url, content=b'{"title": "x"}', headers=route.headers(**media)
        )
        problem = problem_of(answer, 415, "unsupported-media-type")
        sent = content_type or "no Content-Type"
        assert problem["detail"] == f"Send the body as {' or '.join(route.accepts)}, not {sent}."
        assert problem["expected"] == list(route.accepts)
        if route.method == "PATCH":
            assert answer.headers["accept-patch"] == ", ".join(route.accepts)
    assert await _state(client) == before


async def test_a_missing_body_is_still_a_validation_error(client: httpx.AsyncClient) -> None:
    for method, url in (("POST", "/v1/documents"), ("POST", "/v1/ledger-accounts")):
        problem = problem_of(await client.request(method, url), 422, "validation-error")
        assert problem["errors"][0]["field"] == "body"


async def test_json_with_a_structured_suffix_is_still_json(client: httpx.AsyncClient) -> None:
    made = await client.post(
        "/v1/documents",
        content=json.dumps({"title": "t"}).encode(),
        headers={"content-type": "application/vnd.example+json; charset=utf-8"},
    )
    assert made.status_code == 201, made.text


async def test_a_corrected_retry_may_reuse_the_idempotency_key(client: httpx.AsyncClient) -> None:
    """A refused body did nothing, so its answer is not stored under the key (as for a 422)."""
    key = {"idempotency-key": uuid.uuid4().hex}
    good = json.dumps({"amount": 5, "currency": "EUR"}).encode()
    for body, content_type, status in (
        (MALFORMED, JSON, 400),
        (good, "text/plain", 415),
        (good, JSON, 201),
    ):
        answer = await client.post(
            "/v1/payments", content=body, headers={**key, "content-type": content_type}
        )
        assert answer.status_code == status, answer.text
        assert "idempotent-replayed" not in answer.headers
