"""Money in every schema: integers from 1 (amounts) or 0 (balances) to 2**53 - 1, where a JSON
number with a zero fraction (`100.0`) counts as the integer it is, as in JSON Schema; and the
same for the other integer fields of request bodies."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from support import problem_of
from ustun.service.resources.money import MAX_AMOUNT


def _keyed() -> dict[str, str]:
    return {"idempotency-key": uuid.uuid4().hex}


async def _ledger(client: httpx.AsyncClient, balance: Any) -> httpx.Response:
    return await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": balance})


async def _transfer(client: httpx.AsyncClient, amount: Any) -> httpx.Response:
    source = (await _ledger(client, 100)).json()["id"]
    target = (await _ledger(client, 0)).json()["id"]
    body = {"from": source, "to": target, "amount": amount, "currency": "EUR"}
    return await client.post("/v1/transfers", json=body, headers=_keyed())


async def _payment(client: httpx.AsyncClient, amount: Any, order_id: Any = None) -> httpx.Response:
    body = {"amount": amount, "currency": "EUR", "order_id": order_id}
    return await client.post("/v1/payments", json=body, headers=_keyed())


async def test_an_integral_float_is_the_integer(client: httpx.AsyncClient) -> None:
    payment = await _payment(client, 1250.0, order_id=42.0)
    assert payment.status_code == 201, payment.text
    assert (payment.json()["amount"], payment.json()["order_id"]) == (1250, 42)
    assert '"amount":1250,' in payment.text
    ledger = await _ledger(client, float(MAX_AMOUNT))
    assert ledger.status_code == 201, ledger.text
    assert ledger.json()["balance"] == MAX_AMOUNT
    moved = await _transfer(client, 30.0)
    assert moved.status_code == 201, moved.text
    assert moved.json()["amount"] == 30
    endpoint = await _in_flight(client, 4.0)
    assert endpoint.status_code == 201, endpoint.text
    assert endpoint.json()["max_in_flight"] == 4


async def _in_flight(client: httpx.AsyncClient, value: Any) -> httpx.Response:
    body = {"url": "https://example.com/hooks", "max_in_flight": value}
    return await client.post("/v1/webhook-endpoints", json=body)


async def _order(client: httpx.AsyncClient, order_id: Any) -> httpx.Response:
    return await _payment(client, 5, order_id=order_id)


# Not integers (a fraction, a string, a boolean), or out of range; `float(2**53)` is integral
# but past what a double holds exactly, as is `2.0**63` for an order id.
NOT_INTEGERS = [100.5, "100", True]
REFUSED = [
    *[("body.amount", _payment, v) for v in [*NOT_INTEGERS, 0.0, -1.0, float(2**53), 1e300]],
    *[("body.amount", _transfer, v) for v in [*NOT_INTEGERS, 0.0, float(2**53)]],
    *[("body.balance", _ledger, v) for v in [*NOT_INTEGERS, -1.0, float(2**53)]],
    *[("body.order_id", _order, v) for v in [*NOT_INTEGERS, 2.0**63]],
    *[("body.max_in_flight", _in_flight, v) for v in [*NOT_INTEGERS, 0.0, 257.0]],
]


@pytest.mark.parametrize(("field", "send", "value"), REFUSED)
async def test_a_fraction_string_bool_or_out_of_range_is_422(
    client: httpx.AsyncClient, field: str, send: Any, value: Any
) -> None:
    problem = problem_of(await send(client, value), 422, "validation-error")
    assert field in [e["field"] for e in problem["errors"]]
    assert (await client.get("/v1/payments")).json()["data"] == []


@pytest.mark.parametrize("amount", [MAX_AMOUNT + 1, 2**63, 2**64])
async def test_amounts_and_balances_above_2_53_minus_1_are_422(
    client: httpx.AsyncClient, amount: int
) -> None:
    for answer in (
        await _payment(client, amount),
        await _ledger(client, amount),
        await _transfer(client, amount),
    ):
        problem_of(answer, 422, "validation-error")
    assert (await client.get("/v1/payments")).json()["data"] == []


async def test_the_schemas_still_say_integer_with_their_bounds(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    amount = {"type": "integer", "exclusiveMinimum": 0, "maximum": MAX_AMOUNT}
    balance = {"type": "integer", "minimum": 0, "maximum": MAX_AMOUNT}
    for model, field, bounds in (
        ("PaymentCreate", "amount", amount),
        ("TransferCreate", "amount", amount),
        ("LedgerAccountCreate", "balance", balance),
    ):
        schema = schemas[model]["properties"][field]
        assert {k: schema.get(k) for k in bounds} == bounds, (model, schema)
    order_id = schemas["PaymentCreate"]["properties"]["order_id"]["anyOf"][0]
    assert order_id["type"] == "integer"
