"""Input that once answered 500 (both backends): a lone surrogate under an Idempotency-Key, an
integer too long for Python to read, and a `since` whose moment in UTC no `datetime` holds.
Each is a problem+json 4xx that names what is wrong, and nothing is written."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from support import problem_of

JSON = "application/json"
MERGE = "application/merge-patch+json"
DIGITS = "9" * 5000  # Python reads at most 4,300 digits into an int
# Valid RFC 3339, but a day before 0001-01-01 or after 9999-12-31 in UTC.
OUT_OF_RANGE = ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00")


async def _state(client: httpx.AsyncClient) -> list[Any]:
    """What a write by any route here would change."""
    lists = ("payments", "jobs", "webhook-endpoints", "events", "deliveries")
    return [(await client.get(f"/v1/{name}?limit=100")).json() for name in lists]


async def _send(
    client: httpx.AsyncClient, method: str, url: str, body: str, **headers: str
) -> httpx.Response:
    headers = {"content-type": JSON, "idempotency-key": uuid.uuid4().hex, **headers}
    return await client.request(method, url, content=body.encode(), headers=headers)


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (
            "/v1/payments",
            '{"amount": 5, "currency": "EUR", "description": "\\ud800"}',
            "body.description",
        ),
        ("/v1/documents", '{"title": "a\\udc00b"}', "body.title"),
        (
            "/v1/webhook-endpoints",
            '{"url": "https://example.com/h", "description": "\\ud800"}',
            "body.description",
        ),
    ],
)
async def test_a_lone_surrogate_under_an_idempotency_key_is_a_validation_error(
    client: httpx.AsyncClient, url: str, body: str, field: str
) -> None:
    before = await _state(client)
    problem = problem_of(await _send(client, "POST", url, body), 422, "validation-error")
    assert [e["field"] for e in problem["errors"]] == [field]
    assert await _state(client) == before


def _too_long(problem: dict[str, Any]) -> None:
    assert problem["errors"] == [
        {
            "field": "body",
            "message": "a number has more than 4300 digits",
            "type": "number_too_long",
        }
    ]


async def test_an_integer_too_long_to_read_is_a_validation_error_on_every_write(
    client: httpx.AsyncClient,
) -> None:
    made = await _send(client, "POST", "/v1/payments", '{"amount": 5, "currency": "EUR"}')
    payment, payment_tag = made.headers["location"], made.headers["etag"]
    doc = await client.post("/v1/documents", json={"title": "t"})
    document, document_tag = doc.headers["location"], doc.headers["etag"]
    hook = await client.post("/v1/webhook-endpoints", json={"url": "https://example.com/h"})
    endpoint, endpoint_tag = hook.headers["location"], hook.headers["etag"]
    before = await _state(client)
    document_before = (await client.get(document)).json()
    writes = [
        ("PATCH", payment, f'{{"status": {DIGITS}}}', {"if-match": payment_tag}),
        ("PATCH", payment, f'{{"status": "failed", "x": -{DIGITS}}}', {"if-match": payment_tag}),
        (
            "PATCH",
            document,
            f'{{"title": {DIGITS}}}',
            {"if-match": document_tag, "content-type": MERGE},
        ),
        (
            "PATCH",
            document,
            f'{{"extra": [{DIGITS}]}}',
            {"if-match": document_tag, "content-type": MERGE},
        ),
        ("PATCH", endpoint, f'{{"max_in_flight": {DIGITS}}}', {"if-match": endpoint_tag}),
        ("POST", "/v1/payments", f'{{"amount": {DIGITS}, "currency": "EUR"}}', {}),
        ("POST", "/v1/documents", f'{{"title": "t", "n": {DIGITS}}}', {}),
        ("POST", "/v1/ledger-accounts", f'{{"currency": "EUR", "balance": {DIGITS}}}', {}),
        ("POST", "/v1/transfers", f'{{"from": "la_x", "to": "la_y", "amount": {DIGITS}}}', {}),
        ("POST", "/v1/reports", f'{{"period": {DIGITS}, "format": "csv"}}', {}),
        (
            "POST",
            "/v1/webhook-endpoints",
            f'{{"url": "https://example.com/h", "rate_limit": {DIGITS}}}',
            {},
        ),
        ("POST", f"{endpoint}/recover", f'{{"since": {DIGITS}}}', {}),
    ]
    for method, url, body, headers in writes:
        answer = await _send(client, method, url, body, **headers)
        _too_long(problem_of(answer, 422, "validation-error"))
    assert await _state(client) == before
    assert (await client.get(document)).json() == document_before


@pytest.mark.parametrize("since", OUT_OF_RANGE)
async def test_a_since_out_of_range_in_utc_is_refused_naming_it(
    client: httpx.AsyncClient, since: str
) -> None:
    answer = await client.get("/v1/events", params={"since": since})
    problem = problem_of(answer, 422, "validation-error")
    assert [e["field"] for e in problem["errors"]] == ["query.since"]
    assert "years 0001-9999 in UTC" in problem["errors"][0]["message"]


@pytest.mark.parametrize("since", OUT_OF_RANGE)
async def test_recover_since_out_of_range_in_utc_is_refused_naming_it(
    client: httpx.AsyncClient, since: str
) -> None:
    hook = await client.post("/v1/webhook-endpoints", json={"url": "https://example.com/h"})
    recover = f"{hook.headers['location']}/recover"
    answer = await client.post(recover, json={"since": since})
    problem = problem_of(answer, 422, "validation-error")
    assert [e["field"] for e in problem["errors"]] == ["body.since"]
    assert "years 0001-9999 in UTC" in problem["errors"][0]["message"]
    for not_rfc3339 in (0, "2026-12-01", "2026-12-01T00:00:00"):
        refused = await client.post(recover, json={"since": not_rfc3339})
        assert problem_of(refused, 422, "validation-error")["errors"][0]["field"] == "body.since"
    accepted = await client.post(recover, json={"since": "2026-12-01T00:00:00+14:00"})
    assert accepted.status_code == 202, accepted.text
