"""What `emit` writes is a plan written once: run on the async engine's unit of work or on a
synchronous DB-API connection (sqlite3, psycopg 3), on SQLite and PostgreSQL, it leaves the same
event and deliveries."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url, select

from support import sync_connection
from ustun import clock, ids
from ustun.store import Database
from ustun.store.plans import run, run_sync
from ustun.webhooks.adapters import plans
from ustun.webhooks.sending.wakeup import CHANNEL
from ustun.webhooks.tables import deliveries, events
from webhook_support import MakeEndpoint

VARIABLE = {"id", "event_id", "created_at", "updated_at", "next_attempt_at"}


def _event(account_id: str) -> dict[str, Any]:
    return {
        "id": ids.new_id("evt"),
        "account_id": account_id,
        "type": "payment.created",
        "data": '{"id": "pay_1", "note": "100%"}',
        "object_url": "/v1/payments/pay_1",
        "created_at": clock.now(),
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }


async def _written(db: Database, event_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    async with db.read() as conn:
        event = (await conn.execute(select(events).where(events.c.id == event_id))).one()
        sent = await conn.execute(
            select(deliveries)
            .where(deliveries.c.event_id == event_id)
            .order_by(deliveries.c.endpoint_id)
        )
        queued = [dict(row._mapping) for row in sent]
    return dict(event._mapping), queued


async def test_the_emit_plan_leaves_the_same_rows_on_either_kind_of_connection(
    db: Database, database_url: str, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    every, payments = [
        (await make_endpoint(f"http://127.0.0.1:9/{name}", events))[0]
        for name, events in (("every", ("*",)), ("payments", ("payment.*",)))
    ]
    await make_endpoint("http://127.0.0.1:9/jobs", ("job.*",))
    notify = db.dialect == "postgresql"
    on_async, on_sync = _event(account_id), _event(account_id)
    async with db.unit_of_work() as uow:
        queued_async = await run(plans.emit(on_async, None, notify=notify), uow.conn)
    with sync_connection(database_url) as conn:
        queued_sync = run_sync(plans.emit(on_sync, None, notify=notify), conn)
    written = [await _written(db, e["id"]) for e in (on_async, on_sync)]
    for (event, sent), emitted, queued in zip(
        written, (on_async, on_sync), (queued_async, queued_sync), strict=True
    ):
        fresh = {"txid": event["txid"], "seq": event["seq"], "expunged_at": None}
        assert event == {**emitted, **fresh}
        assert sorted(d["id"] for d in sent) == sorted(queued)
        assert [d["endpoint_id"] for d in sent] == sorted([every, payments])
        assert all(d["next_attempt_at"] == d["created_at"] == emitted["created_at"] for d in sent)
    same = [
        [{k: v for k, v in d.items() if k not in VARIABLE} for d in sent] for _, sent in written
    ]
    assert same[0] == same[1]
    assert same[0][0]["status"] == "pending"
    assert same[0][0]["attempt_count"] == 0


async def test_an_event_for_one_endpoint_or_none_on_either_kind_of_connection(
    db: Database, database_url: str, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    only, _ = await make_endpoint("http://127.0.0.1:9/only", ("job.*",))
    notify = db.dialect == "postgresql"
    pinged, unmatched = _event(account_id), {**_event(account_id), "type": "document.created"}
    with sync_connection(database_url) as conn:
        assert len(run_sync(plans.emit(pinged, only, notify=notify), conn)) == 1
        assert run_sync(plans.emit(unmatched, None, notify=notify), conn) == []
    assert [d["endpoint_id"] for d in (await _written(db, pinged["id"]))[1]] == [only]
    event, sent = await _written(db, unmatched["id"])
    assert event["type"] == "document.created"
    assert sent == []


async def test_the_plan_wakes_dispatchers_listening_on_postgresql_once_it_commits(
    db: Database, database_url: str, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    if db.dialect != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's (SQLite's dispatchers poll, or hear the doorbell)")
    await make_endpoint("http://127.0.0.1:9/hook", ("*",))
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as listening:
        listening.execute(f"LISTEN {CHANNEL}")
        with sync_connection(database_url) as conn:
            run_sync(plans.emit(_event(account_id), None, notify=True), conn)
            assert list(listening.notifies(timeout=0.2, stop_after=1)) == []
        heard = list(listening.notifies(timeout=10, stop_after=1))
    assert [n.channel for n in heard] == [CHANNEL]
