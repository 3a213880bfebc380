"""`POST /v1/transfers`: atomic, idempotent moves of money between two ledger accounts."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import problem_of
from ustun.service.resources.money import MAX_AMOUNT


async def open_account(http: httpx.AsyncClient, balance: int, currency: str = "EUR") -> str:
    response = await http.post(
        "/v1/ledger-accounts", json={"currency": currency, "balance": balance}
    )
    assert response.status_code == 201
    return str(response.json()["id"])


async def balance(http: httpx.AsyncClient, ledger_id: str) -> int:
    return int((await http.get(f"/v1/ledger-accounts/{ledger_id}")).json()["balance"])


async def transfer(
    http: httpx.AsyncClient, key: str, source: str, target: str, amount: int, **extra: Any
) -> httpx.Response:
    body = {"from": source, "to": target, "amount": amount, "currency": "EUR", **extra}
    return await http.post("/v1/transfers", json=body, headers={"idempotency-key": key})


async def test_moves_money_and_replays_on_retry(client: httpx.AsyncClient) -> None:
    a, b = await open_account(client, 100), await open_account(client, 0)
    first = await transfer(client, "t-1", a, b, 30)
    again = await transfer(client, "t-1", a, b, 30)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    moved = first.json()
    assert moved["id"].startswith("tr_")
    assert (moved["from"], moved["to"], moved["amount"], moved["currency"]) == (a, b, 30, "EUR")
    assert first.headers["location"] == f"/v1/transfers/{moved['id']}"
    assert (await client.get(first.headers["location"])).json() == moved
    assert (await balance(client, a), await balance(client, b)) == (70, 30)


async def test_requires_an_idempotency_key(client: httpx.AsyncClient) -> None:
    a, b = await open_account(client, 100), await open_account(client, 0)
    body = {"from": a, "to": b, "amount": 1, "currency": "EUR"}
    response = await client.post("/v1/transfers", json=body)
    assert response.status_code == 400
    assert response.json()["type"].endswith("/problems/idempotency-key-missing")


async def test_insufficient_funds_is_409_and_moves_nothing(client: httpx.AsyncClient) -> None:
    a, b = await open_account(client, 10), await open_account(client, 0)
    refused = await transfer(client, "t-2", a, b, 11)
    assert refused.status_code == 409
    assert refused.json()["type"].endswith("/problems/insufficient-funds")
    assert refused.json()["balance"] == 10
    assert (await balance(client, a), await balance(client, b)) == (10, 0)
    # The refusal is the stored outcome of this key, even once the money is there.
    assert (await transfer(client, "t-3", b, a, 0 + 1)).status_code == 409
    assert (await transfer(client, "t-2", a, b, 11)).headers["idempotent-replayed"] == "true"


async def test_whole_balance_can_move(client: httpx.AsyncClient) -> None:
    a, b = await open_account(client, 10), await open_account(client, 0)
    assert (await transfer(client, "all", a, b, 10)).status_code == 201
    assert (await balance(client, a), await balance(client, b)) == (0, 10)


async def test_currency_mismatch_is_422(client: httpx.AsyncClient) -> None:
    a, b = await open_account(client, 100), await open_account(client, 0, "USD")
    response = await transfer(client, "fx", a, b, 5)
    assert response.status_code == 422
    assert response.json()["type"].endswith("/problems/validation-error")
    assert response.json()["errors"][0]["field"] == "body.currency"
    assert (await balance(client, a), await balance(client, b)) == (100, 0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("to", "SAME"),
        ("amount", 0),
        ("amount", -1),
        ("amount", 1.5),
        ("amount", "5"),
        ("currency", "eur"),
        ("memo", "unknown fields are refused"),
        ("from", None),
    ],
)
async def test_invalid_bodies_are_422(client: httpx.AsyncClient, field: str, value: Any) -> None:
    a, b = await open_account(client, 100), await open_account(client, 0)
    body: dict[str, Any] = {"from": a, "to": b, "amount": 5, "currency": "EUR"}
    body[field] = a if value == "SAME" else value
    if value is None:
        del body[field]
    response = await client.post("/v1/transfers", json=body, headers={"idempotency-key": "bad"})
    assert response.status_code == 422
    assert response.json()["type"].endswith("/problems/validation-error")
    assert await balance(client, a) == 100


async def test_another_accounts_ledger_account_is_404(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    mine = await open_account(client, 100)
    theirs = await open_account(other_client, 100)
    for source, target in ((mine, theirs), (theirs, mine)):
        response = await transfer(client, f"x-{source}", source, target, 5)
        assert response.status_code == 404
        assert response.json()["type"].endswith("/problems/not-found")
    assert await balance(client, mine) == 100
    assert await balance(other_client, theirs) == 100


async def test_opposite_concurrent_transfers_never_deadlock(client: httpx.AsyncClient) -> None:
    a, b = await open_account(client, 1000), await open_account(client, 1000)
    results = await asyncio.gather(
        *(transfer(client, f"swap-{i}", *((a, b) if i % 2 else (b, a)), 10) for i in range(20))
    )
    assert [r.status_code for r in results] == [201] * 20
    assert await balance(client, a) + await balance(client, b) == 2000


# Up to 6 distinct transfers among 3 ledger accounts, each key sent 1-4 times, in random
# concurrent batches: money is conserved and every key takes effect at most once.
TRANSFERS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(1, 60)).filter(
        lambda t: t[0] != t[1]
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(transfers=TRANSFERS, data=st.data())
async def test_random_interleavings_of_transfers_and_retries(
    client: httpx.AsyncClient, transfers: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    ledger = [await open_account(client, 100) for _ in range(3)]
    run = uuid.uuid4().hex
    sends = data.draw(
        st.permutations(
            [i for i, _ in enumerate(transfers) for _ in range(data.draw(st.integers(1, 4)))]
        )
    )
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(sends) - 1)), max_size=3)))
    batches = [sends[i:j] for i, j in zip([0, *cuts], [*cuts, len(sends)], strict=True)]
    applied: dict[int, set[str]] = {}
    for batch in batches:
        responses = await asyncio.gather(
            *(
                transfer(
                    client,
                    f"{run}-{i}",
                    ledger[transfers[i][0]],
                    ledger[transfers[i][1]],
                    transfers[i][2],
                )
                for i in batch
            )
        )
        for i, response in zip(batch, responses, strict=True):
            assert response.status_code in (201, 409), response.text
            if response.status_code == 201:
                applied.setdefault(i, set()).add(response.json()["id"])
    assert all(len(ids) == 1 for ids in applied.values())
    expected = [100, 100, 100]
    for i in applied:
        source, target, amount = transfers[i]
        expected[source] -= amount
        expected[target] += amount
    assert [await balance(client, la) for la in ledger] == expected
    assert sum(expected) == 300


async def test_a_transfer_past_the_largest_balance_is_409_and_moves_nothing(
    client: httpx.AsyncClient,
) -> None:
    a, b = await open_account(client, MAX_AMOUNT), await open_account(client, MAX_AMOUNT - 5)
    refused = await transfer(client, "over", a, b, 6)
    problem = problem_of(refused, 409, "balance-limit-exceeded")
    assert (problem["balance"], problem["max_balance"]) == (MAX_AMOUNT - 5, MAX_AMOUNT)
    assert (await balance(client, a), await balance(client, b)) == (MAX_AMOUNT, MAX_AMOUNT - 5)
    events = (await client.get("/v1/events?type=transfer.completed")).json()["data"]
    assert events == []
    assert (await transfer(client, "to-the-brim", a, b, 5)).status_code == 201
    assert (await balance(client, a), await balance(client, b)) == (MAX_AMOUNT - 5, MAX_AMOUNT)


async def test_concurrent_transfers_never_push_a_balance_past_the_largest(
    client: httpx.AsyncClient,
) -> None:
    target = await open_account(client, MAX_AMOUNT - 50)
    sources = [await open_account(client, 10) for _ in range(16)]
    answers = await asyncio.gather(
        *(transfer(client, f"fill-{i}", source, target, 10) for i, source in enumerate(sources))
    )
    assert sorted(a.status_code for a in answers) == [201] * 5 + [409] * 11
    assert {a.json()["type"].rsplit("/", 1)[1] for a in answers if a.status_code == 409} == {
        "balance-limit-exceeded"
    }
    assert await balance(client, target) == MAX_AMOUNT
    assert sum([await balance(client, s) for s in sources]) == 16 * 10 - 50
