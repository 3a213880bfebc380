"""Wire details of issue 28: a 201's `Date` is never before its `Last-Modified`."""

from __future__ import annotations

import uuid

import httpx

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
