"""`POST /v1/payments`: key required, 201 with Location and a strong ETag, replayed on retry."""

from __future__ import annotations

import uuid

import httpx
import pytest

from ustun.service.resources.money import MAX_AMOUNT

BODY = {"amount": 1250, "currency": "EUR", "order_id": 42, "description": "order #42"}


def key() -> dict[str, str]:
    return {"idempotency-key": str(uuid.uuid4())}


async def test_creates_a_pending_payment(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/payments", json=BODY, headers=key())
    assert response.status_code == 201
    payment = response.json()
    assert payment["id"].startswith("pay_")
    assert {k: payment[k] for k in BODY} == BODY
    assert payment["status"] == "pending"
    assert payment["created_at"] == payment["updated_at"]
    assert payment["created_at"].endswith("Z")
    assert response.headers["location"] == f"/v1/payments/{payment['id']}"
    assert response.headers["etag"] == '"1"'
    listed = (await client.get("/v1/payments")).json()["data"]
    assert [p["id"] for p in listed] == [payment["id"]]


async def test_optional_fields_default_to_null(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/payments", json={"amount": 1, "currency": "JPY"}, headers=key()
    )
    assert response.status_code == 201
    assert response.json()["order_id"] is None
    assert response.json()["description"] is None


async def test_requires_an_idempotency_key(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/payments", json=BODY)
    assert response.status_code == 400
    assert response.json()["type"].endswith("/problems/idempotency-key-missing")
    assert (await client.get("/v1/payments")).json()["data"] == []


async def test_retry_replays_the_same_payment(client: httpx.AsyncClient) -> None:
    headers = key()
    first = await client.post("/v1/payments", json=BODY, headers=headers)
    again = await client.post("/v1/payments", json=BODY, headers=headers)
    assert again.status_code == 201
    assert again.content == first.content
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["etag"] == first.headers["etag"]
    assert again.headers["last-modified"] == first.headers["last-modified"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len((await client.get("/v1/payments")).json()["data"]) == 1


async def test_same_key_different_body_is_422(client: httpx.AsyncClient) -> None:
    headers = key()
    await client.post("/v1/payments", json=BODY, headers=headers)
    reused = await client.post("/v1/payments", json={**BODY, "amount": 1}, headers=headers)
    assert reused.status_code == 422
    assert reused.json()["type"].endswith("/problems/idempotency-key-reused")


@pytest.mark.parametrize(
    "body",
    [
        {**BODY, "amount": 0},
        {**BODY, "amount": -5},
        {**BODY, "amount": 12.5},
        {**BODY, "amount": "1250"},
        {**BODY, "amount": True},
        {**BODY, "amount": MAX_AMOUNT + 1},
        {**BODY, "currency": "eur"},
        {**BODY, "currency": "EURO"},
        {**BODY, "currency": "E1R"},
        {**BODY, "order_id": "42"},
        {**BODY, "description": 7},
        {**BODY, "status": "succeeded"},  # server-set: unknown fields are refused
        {**BODY, "id": "pay_mine"},
        {"currency": "EUR"},
        {"amount": 5},
    ],
)
async def test_invalid_bodies_are_422_and_leave_nothing(
    client: httpx.AsyncClient, body: dict[str, object]
) -> None:
    headers = key()
    response = await client.post("/v1/payments", json=body, headers=headers)
    assert response.status_code == 422
    assert response.json()["type"].endswith("/problems/validation-error")
    assert response.json()["errors"]
    # Validation failures are not stored: the same key with a valid body then works.
    assert (await client.post("/v1/payments", json=BODY, headers=headers)).status_code == 201


async def test_another_account_with_the_same_key_gets_its_own_payment(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    headers = key()
    mine = await client.post("/v1/payments", json=BODY, headers=headers)
    theirs = await other_client.post("/v1/payments", json=BODY, headers=headers)
    assert theirs.status_code == 201
    assert "idempotent-replayed" not in theirs.headers
    assert theirs.json()["id"] != mine.json()["id"]
