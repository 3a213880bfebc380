"""`POST /v1/ledger-accounts` and `GET /v1/ledger-accounts/{id}`."""

from __future__ import annotations

import httpx
import pytest


async def test_create_then_read(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 500})
    assert created.status_code == 201
    body = created.json()
    assert body["id"].startswith("la_")
    assert (body["currency"], body["balance"]) == ("EUR", 500)
    assert created.headers["location"] == f"/v1/ledger-accounts/{body['id']}"
    assert created.headers["etag"] == '"1"'
    read = await client.get(created.headers["location"])
    assert read.status_code == 200
    assert read.json() == body
    assert read.headers["etag"] == '"1"'


async def test_a_zero_opening_balance_is_fine(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/ledger-accounts", json={"currency": "USD", "balance": 0})
    assert created.status_code == 201


async def test_creation_is_idempotent_when_keyed(client: httpx.AsyncClient) -> None:
    body = {"currency": "EUR", "balance": 1}
    headers = {"idempotency-key": "open-1"}
    first = await client.post("/v1/ledger-accounts", json=body, headers=headers)
    again = await client.post("/v1/ledger-accounts", json=body, headers=headers)
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"


@pytest.mark.parametrize(
    "body",
    [
        {"currency": "EUR", "balance": -1},
        {"currency": "EUR", "balance": 1.5},
        {"currency": "EUR", "balance": "10"},
        {"currency": "eur", "balance": 1},
        {"currency": "EUR"},
        {"balance": 1},
        {"currency": "EUR", "balance": 1, "id": "la_mine"},
    ],
)
async def test_invalid_bodies_are_422(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    response = await client.post("/v1/ledger-accounts", json=body)
    assert response.status_code == 422
    assert response.json()["type"].endswith("/problems/validation-error")


async def test_another_accounts_ledger_account_is_not_found(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    created = await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 5})
    response = await other_client.get(created.headers["location"])
    assert response.status_code == 404
    assert response.json()["type"].endswith("/problems/not-found")
    assert (await client.get("/v1/ledger-accounts/la_nope")).status_code == 404
