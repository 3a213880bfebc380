"""Queue health from the database: depth and age of the oldest due webhook delivery."""

from __future__ import annotations

from datetime import timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ustun import clock
from ustun.service.operations import queues
from ustun.service.plumbing.accounts import account_for_key
from ustun.store import Database
from ustun.webhooks.tables import deliveries


async def _due_delivery(http: httpx.AsyncClient) -> str:
    created = await http.post("/v1/webhook-endpoints", json={"url": "https://example.com/q"})
    assert created.status_code == 201, created.text
    tested = await http.post(f"/v1/webhook-endpoints/{created.json()['id']}/test")
    assert tested.status_code == 202
    listed = await http.get("/v1/deliveries", params={"event_id": tested.json()["id"]})
    delivery_id: str = listed.json()["data"][0]["id"]
    return delivery_id


async def test_an_account_sees_its_own_oldest_due_delivery(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account = await account_for_key(db, api_key)
    assert account is not None
    async with db.read() as conn:
        (empty,) = await queues.webhook_deliveries(conn, account.id)
    assert (empty.depth, empty.oldest_due_age) == (0, 0.0)

    delivery_id = await _due_delivery(client)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            deliveries.update()
            .where(deliveries.c.id == delivery_id)
            .values(next_attempt_at=clock.now() - timedelta(minutes=10))
        )
    async with db.read() as conn:
        (stat,) = await queues.webhook_deliveries(conn, account.id)
        everyone = await queues.queue_probe(db)(conn)
    assert stat.depth == 1
    assert 590 < stat.oldest_due_age < 700
    assert everyone[0].oldest_due_age >= stat.oldest_due_age

    scraped = (await client.get("/metrics")).text
    ages = {
        s.labels["queue"]: s.value
        for family in text_string_to_metric_families(scraped)
        for s in family.samples
        if s.name == "ustun_queue_oldest_due_age_seconds"
    }
    assert ages["webhook_deliveries"] >= 590
