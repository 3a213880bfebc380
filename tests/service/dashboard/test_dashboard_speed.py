"""Every dashboard page answers in under 200 ms with 10,000 events (and their deliveries)."""

from __future__ import annotations

import json
import statistics
import time
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI

from dashboard_support import log_in
from ustun import clock, ids
from ustun.service.plumbing.accounts import account_for_key
from ustun.webhooks.tables import deliveries, endpoints, events

EVENTS = 10_000
BUDGET = 0.200  # seconds, the median of a few loads of each page
TYPES = ("payment.created", "payment.succeeded", "transfer.completed")
STATUSES = ("succeeded", "succeeded", "failed", "dead", "pending")


async def _fill(app: FastAPI, api_key: str) -> tuple[str, str, str]:
    """10,000 events of the key's account, each with one delivery to one endpoint."""
    account = await account_for_key(app.state.db, api_key)
    assert account is not None
    start = clock.now() - timedelta(days=3)
    endpoint_id = ids.new_id("we")
    event_rows, delivery_rows = [], []
    for n in range(EVENTS):
        at = start + timedelta(seconds=20 * n)
        event_rows.append(
            {
                "id": ids.new_id("evt"),
                "account_id": account.id,
                "type": TYPES[n % len(TYPES)],
                "data": json.dumps({"id": f"pay_{n}", "amount": n + 1, "currency": "EUR"}),
                "object_url": None,
                "created_at": at,
            }
        )
        status = STATUSES[n % len(STATUSES)]
        delivery_rows.append(
            {
                "id": ids.new_id("dlv"),
                "account_id": account.id,
                "endpoint_id": endpoint_id,
                "event_id": event_rows[-1]["id"],
                "status": status,
                "attempt_count": 1,
                "next_attempt_at": at if status in ("pending", "failed") else None,
                "created_at": at,
                "updated_at": at,
            }
        )
    async with app.state.db.unit_of_work() as uow:
        await uow.conn.execute(
            endpoints.insert().values(
                id=endpoint_id,
                account_id=account.id,
                url="https://example.com/hook",
                description="",
                events='["*"]',
                payload="full",
                enabled=True,
                max_in_flight=8,
                secret=app.state.secret_box.seal("whsec_" + "A" * 32, context=endpoint_id),
                version=1,
                created_at=start,
                updated_at=start,
            )
        )
        await uow.conn.execute(events.insert(), event_rows)
        await uow.conn.execute(deliveries.insert(), delivery_rows)
    return endpoint_id, event_rows[EVENTS // 2]["id"], delivery_rows[EVENTS // 2]["id"]


@pytest.mark.timeout(120)
async def test_pages_answer_within_budget_with_ten_thousand_events(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str
) -> None:
    endpoint_id, event_id, delivery_id = await _fill(app, api_key)
    await log_in(browser, api_key)
    pages = [
        "/dashboard",
        "/dashboard/endpoints",
        f"/dashboard/endpoints/{endpoint_id}",
        "/dashboard/events",
        "/dashboard/events?type=transfer.completed",
        f"/dashboard/events/{event_id}",
        "/dashboard/deliveries",
        "/dashboard/deliveries?status=dead",
        f"/dashboard/deliveries?endpoint_id={endpoint_id}&status=failed",
        f"/dashboard/deliveries/{delivery_id}",
    ]
    slow = {}
    for path in pages:
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            response = await browser.get(path)
            timings.append(time.perf_counter() - started)
            assert response.status_code == 200, (path, response.text[:300])
        median = statistics.median(timings)
        print(f"{path}: median {median * 1000:.1f} ms")
        if median >= BUDGET:
            slow[path] = round(median * 1000, 1)
    assert not slow, f"pages over {BUDGET * 1000:.0f} ms: {slow}"
