"""An async view with `@idempotent`, served under ASGI (gunicorn's uvicorn workers): its ORM
writes and its event commit with the stored answer, once, whatever the duplicates."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from django_support import Shop

pytestmark = pytest.mark.e2e


def test_async_view_runs_once_per_key_under_asgi(shop: Shop) -> None:
    served = shop.serve(workers=2, asgi=True)
    key, amount, n = str(uuid.uuid4()), 7007, 12
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        with httpx.Client(base_url=served.url, timeout=90) as client:
            start.wait()
            return client.post(
                "/guest/payments",
                json={"amount": amount, "currency": "EUR"},
                headers={"Idempotency-Key": key},
            )

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(post, range(n)))
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {201, 409}, statuses
    fresh = [a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers]
    assert len(fresh) == 1, statuses
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
