"""An async view with `@idempotent`, served under ASGI (gunicorn's uvicorn workers): its ORM
writes and its event commit with the stored answer, once, whatever the duplicates."""

from __future__ import annotations

import uuid

import httpx
import pytest

from django_support import Shop
from example_shops import executed_once, race

pytestmark = pytest.mark.e2e


def test_async_view_runs_once_per_key_under_asgi(shop: Shop) -> None:
    served = shop.serve(workers=2, asgi=True)
    amount = 7007

    def guest() -> httpx.Client:
        return httpx.Client(base_url=served.url, timeout=90)

    executed_once(race(guest, 12, "/guest/payments", str(uuid.uuid4()), amount))
    assert shop.scalar(f"SELECT count(*) FROM shop_payment WHERE amount = {amount}") == 1
    assert shop.scalar("SELECT count(*) FROM webhook_events WHERE type = 'payment.created'") == 1
    with httpx.Client(base_url=served.url, timeout=30) as client:
        missing = client.post("/guest/payments", json={"amount": 1, "currency": "EUR"})
        assert missing.status_code == 400
        assert missing.json()["type"] == "/problems/idempotency-key-missing"
        invalid = client.post(
            "/guest/payments",
            json={"amount": -1, "currency": "EUR"},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert invalid.status_code == 400
        assert "amount" in invalid.json()
