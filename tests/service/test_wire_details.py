"""Wire details of issue 28: a 201's `Date` is never before its `Last-Modified`, and a malformed
`If-Match` is a 400."""

from __future__ import annotations

import uuid

import httpx
import pytest

from support import problem_of
from ustun.http.dates import parse_http_date


def _key() -> dict[str, str]:
    return {"idempotency-key": str(uuid.uuid4())}


async def test_a_201_is_never_modified_after_its_date(client: httpx.AsyncClient) -> None:
    """RFC 9110 §8.8.2.1: an origin server MUST NOT send a Last-Modified later than its Date.
    Sent from the clock as the answer starts, `Date` comes after whatever the request wrote."""
    money = {"amount": 100, "currency": "EUR"}
    for _ in range(20):
        created = await client.post("/v1/payments", json=money, headers=_key())
        assert created.status_code == 201, created.text
        assert created.headers.get_list("date") == [created.headers["date"]]
        sent = parse_http_date(created.headers["date"])
        modified = parse_http_date(created.headers["last-modified"])
        assert sent is not None
        assert modified is not None
        assert modified <= sent


@pytest.mark.parametrize("value", ["1", "3, 4", 'W/ "1"', '"1", *'])
async def test_a_malformed_if_match_is_400_and_changes_nothing(
    client: httpx.AsyncClient, value: str
) -> None:
    """RFC 9110 §13.1.1: If-Match = "*" / #entity-tag. Outside that grammar nothing can match,
    so it is a bad request (400 `precondition-invalid`), not a false precondition (412)."""
    document = await client.post("/v1/documents", json={"title": "Plan"})
    payment = await client.post(
        "/v1/payments", json={"amount": 5, "currency": "EUR"}, headers=_key()
    )
    hook = await client.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/a"})
    bad = {"if-match": value}
    merge = {**bad, "content-type": "application/merge-patch+json"}
    writes = [
        client.put(document.headers["location"], json={"title": "x"}, headers=bad),
        client.patch(document.headers["location"], json={"title": "x"}, headers=merge),
        client.delete(document.headers["location"], headers=bad),
        client.patch(payment.headers["location"], json={"status": "failed"}, headers=bad),
        client.patch(
            f"/v1/webhook-endpoints/{hook.json()['id']}", json={"description": "x"}, headers=bad
        ),
        client.get(document.headers["location"], headers=bad),
    ]
    for write in writes:
        body = problem_of(await write, 400, "precondition-invalid")
        assert body["header"] == "If-Match"
        assert '`"3"`' in body["detail"]
    assert (await client.get(document.headers["location"])).json()["version"] == 1
    assert (await client.get(payment.headers["location"])).json()["status"] == "pending"
    stale = await client.put(
        document.headers["location"], json={"title": "x"}, headers={"if-match": '"1.0"'}
    )
    problem_of(stale, 412, "precondition-failed")


async def test_the_document_lists_the_400_wherever_if_match_is_read(
    client: httpx.AsyncClient,
) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    taking = [
        (path, method, operation)
        for path, item in paths.items()
        for method, operation in item.items()
        if any(p["name"] == "If-Match" for p in operation.get("parameters", ()))
    ]
    assert len(taking) >= 6
    for path, method, operation in taking:
        assert "precondition-invalid" in operation["responses"]["400"]["x-problems"], (path, method)
