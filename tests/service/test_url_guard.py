"""A NUL in the URL is refused as bad input (Schemathesis found it as a 500 on PostgreSQL)."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize(
    ("path", "part"),
    [
        ("/v1/payments/a%00b", "path"),
        ("/v1/documents/a%00b", "path"),
        ("/v1/payments?cursor=a%00", "query"),
        ("/v1/payments?x=%00", "query"),
    ],
)
async def test_nul_in_the_url_is_a_validation_problem(
    client: httpx.AsyncClient, path: str, part: str
) -> None:
    response = await client.get(path)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"].endswith("/problems/validation-error")
    assert body["errors"][0]["field"] == part
    assert body["instance"] == f"urn:ustun:request:{response.headers['x-request-id']}"


async def test_other_urls_pass(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/payments?cursor=abc")).status_code == 200
    assert (await client.get("/v1/payments/pay_%2500")).status_code == 404
