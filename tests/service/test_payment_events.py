"""Payment changes emit their events in the same unit of work, or not at all."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import insert, select

from ustun import clock, ids
from ustun.service import resources
from ustun.service.plumbing.accounts import hash_key
from ustun.service.resources.schema import payments
from ustun.store import Database
from ustun.store.tables import api_keys


async def _payment(db: Database, key: str) -> str:
    async with db.unit_of_work() as uow:
        account_id = await uow.conn.scalar(
            select(api_keys.c.account_id).where(api_keys.c.key_hash == hash_key(key))
        )
        now = clock.now()
        payment_id = ids.new_id("pay")
        await uow.conn.execute(
            insert(payments).values(
                id=payment_id,
                account_id=account_id,
                amount=1250,
                currency="EUR",
                status="pending",
                version=1,
                created_at=now,
                updated_at=now,
            )
        )
    return payment_id


async def test_patch_emits_the_new_status(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    payment_id = await _payment(db, api_key)
    await client.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/p"})
    done = await client.patch(
        f"/v1/payments/{payment_id}", json={"status": "succeeded"}, headers={"if-match": '"1"'}
    )
    assert done.status_code == 200, done.text
    logged = (await client.get("/v1/events", params={"type": "payment.succeeded"})).json()["data"]
    assert [e["data"]["id"] for e in logged] == [payment_id]
    assert logged[0]["data"]["status"] == "succeeded"
    queued = (await client.get("/v1/deliveries", params={"event_id": logged[0]["id"]})).json()
    assert len(queued["data"]) == 1


async def test_rolled_back_request_emits_nothing(
    client: httpx.AsyncClient, db: Database, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    payment_id = await _payment(db, api_key)
    real_emit = resources.payments.emit

    async def emit_then_fail(*args: Any, **kwargs: Any) -> str:
        await real_emit(*args, **kwargs)
        raise RuntimeError("the request fails after emitting")

    monkeypatch.setattr(resources.payments, "emit", emit_then_fail)
    # The in-process transport re-raises what the app answered 500 for.
    with pytest.raises(RuntimeError, match="after emitting"):
        await client.patch(
            f"/v1/payments/{payment_id}", json={"status": "cancelled"}, headers={"if-match": '"1"'}
        )
    assert (await client.get("/v1/events")).json()["data"] == []
    assert (await client.get(f"/v1/payments/{payment_id}")).json()["status"] == "pending"


async def test_create_payment_and_transfer_emit_events(client: httpx.AsyncClient) -> None:
    made = await client.post(
        "/v1/payments",
        json={"amount": 500, "currency": "EUR"},
        headers={"idempotency-key": "pay-evt-1"},
    )
    assert made.status_code == 201, made.text
    a = (await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 100})).json()
    b = (await client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": 0})).json()
    moved = await client.post(
        "/v1/transfers",
        json={"from": a["id"], "to": b["id"], "amount": 60, "currency": "EUR"},
        headers={"idempotency-key": "tr-evt-1"},
    )
    assert moved.status_code == 201, moved.text
    short = await client.post(
        "/v1/transfers",
        json={"from": a["id"], "to": b["id"], "amount": 1000, "currency": "EUR"},
        headers={"idempotency-key": "tr-evt-2"},
    )
    assert short.status_code == 409
    logged = (await client.get("/v1/events")).json()["data"]
    assert [(e["type"], e["data"]["id"]) for e in logged] == [
        ("transfer.completed", moved.json()["id"]),
        ("payment.created", made.json()["id"]),
    ]
