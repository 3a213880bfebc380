"""Payload filters applied where deliveries are queued (`adapters.plans.emit`), on SQLite and
PostgreSQL: a filtered-out event gets no delivery, on the async unit of work and on a host
framework's synchronous connection (Django's and Flask's `emit`), and a matching one arrives
over real HTTP; an endpoint's test ping is not filtered; migration 0021 goes down and up."""

from __future__ import annotations

import json
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, func, select

from support import new_account, sync_connection
from ustun.errors import ProblemError
from ustun.store import Database
from ustun.store.migrate import _config, check_current
from ustun.webhooks import endpoints as ops
from ustun.webhooks import filters, operations
from ustun.webhooks.endpoint_body import endpoint_fields
from ustun.webhooks.operational import ENDPOINT_ENABLED
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.dispatcher import Dispatcher
from ustun.webhooks.sending.outbox import emit, emit_on
from ustun.webhooks.tables import deliveries, endpoints
from webhook_support import MakeEndpoint, Receiver, send, until

BIG = {"amount": {"$gte": 1000}}
EURO = {"currency": {"$in": ["EUR"]}, "customer.country": {"$ne": "US"}}


async def _targets(db: Database, event_id: str) -> list[str]:
    """The endpoints the event got a delivery to, sorted."""
    async with db.read() as conn:
        found = await conn.scalars(
            select(deliveries.c.endpoint_id).where(deliveries.c.event_id == event_id)
        )
        return sorted(found)


async def test_an_event_gets_deliveries_only_to_the_endpoints_whose_filter_passes_it(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    plain, _ = await make_endpoint("http://127.0.0.1:9/plain", ("payment.*",))
    big, _ = await make_endpoint("http://127.0.0.1:9/big", ("payment.*",), filter=BIG)
    euro, _ = await make_endpoint("http://127.0.0.1:9/euro", ("*",), filter=EURO)
    either, _ = await make_endpoint(
        "http://127.0.0.1:9/either", ("payment.*",), filter={"$or": [BIG, EURO]}
    )
    await make_endpoint("http://127.0.0.1:9/jobs", ("job.*",), filter={})
    cases = [
        ({"amount": 5000, "currency": "EUR"}, [plain, big, euro, either]),
        ({"amount": 5000, "currency": "USD"}, [plain, big, either]),
        ({"amount": 10, "currency": "EUR", "customer": {"country": "DE"}}, [plain, euro, either]),
        ({"amount": 10, "currency": "EUR", "customer": {"country": "US"}}, [plain]),
        ({"amount": "5000", "currency": ["EUR"]}, [plain]),
    ]
    for data, wanted in cases:
        event_id = await send(db, account_id, "payment.created", **data)
        assert await _targets(db, event_id) == sorted(wanted), data


async def test_one_unit_of_work_filters_each_of_its_events(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    big, _ = await make_endpoint("http://127.0.0.1:9/big", filter=BIG)
    async with db.unit_of_work() as uow:
        sent = [
            await emit(uow, account_id, "payment.created", {"id": f"pay_{n}", "amount": n})
            for n in (999, 1000, 0, 1001)
        ]
    assert [await _targets(db, e) for e in sent] == [[], [big], [], [big]]


async def test_django_and_flask_emit_filters_on_their_own_connection(
    db: Database, database_url: str, box: SecretBox
) -> None:
    """`endpoints.create` and `emit` of Django and Flask are `insert_on` and `emit_on` on the
    host framework's connection: the same checks and the same plan."""
    values = endpoint_fields("https://hooks.example.com/big", ["payment.*"], {"filter": BIG})
    with sync_connection(database_url) as conn:
        big = ops.insert_on(conn, box, "shop", values, max_endpoints=10)
        small = emit_on(conn, "payment.created", {"id": "pay_1", "amount": 5}, account="shop")
        large = emit_on(conn, "payment.created", {"id": "pay_2", "amount": 5000}, account="shop")
    assert await _targets(db, small) == []
    assert await _targets(db, large) == [big.id]
    with pytest.raises(ProblemError) as refused:
        endpoint_fields("https://hooks.example.com/x", ["*"], {"filter": {"amount": {"$gt": []}}})
    [error] = refused.value.extensions["errors"]
    assert error["field"] == "body.filter"
    assert error["type"] == "filter"
    assert error["message"].startswith("filter.amount.$gt: ")


async def test_a_ping_to_one_endpoint_is_not_filtered(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    picky, _ = await make_endpoint("http://127.0.0.1:9/picky", filter={"never": True})
    event = await operations.send_test(db, account_id, picky, per_minute=10)
    assert await _targets(db, event.id) == [picky]


async def test_operational_events_are_filtered_by_their_data_too(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    mine, _ = await make_endpoint("http://127.0.0.1:9/ops", ("endpoint.*",))
    ops_for_mine, _ = await make_endpoint(
        "http://127.0.0.1:9/ops-mine", ("endpoint.*",), filter={"id": mine}
    )
    other, _ = await make_endpoint("http://127.0.0.1:9/other", ("payment.*",))
    events = []
    for endpoint_id in (mine, other):
        async with db.unit_of_work() as uow:
            data = {"id": endpoint_id, "object": "webhook_endpoint", "reason": "test"}
            events.append(await emit(uow, account_id, ENDPOINT_ENABLED, data))
    assert await _targets(db, events[0]) == sorted([mine, ops_for_mine])
    assert await _targets(db, events[1]) == [mine]


async def test_a_refused_filter_is_never_stored(
    db: Database, box: SecretBox, account_id: str
) -> None:
    with pytest.raises(filters.FilterError, match=r"^filter\.\$or: "):
        async with db.unit_of_work() as uow:
            await ops.create(
                uow, box, account_id, url="http://127.0.0.1:9/x", events=["*"], filter={"$or": []}
            )
    async with db.read() as conn:
        held = select(func.count()).where(endpoints.c.account_id == account_id)
        assert await conn.scalar(held) == 0


async def test_a_matching_event_arrives_over_http_and_a_filtered_one_never_leaves(
    db: Database,
    account_id: str,
    make_endpoint: MakeEndpoint,
    receiver: Receiver,
    dispatcher: Dispatcher,
) -> None:
    await make_endpoint(receiver.url("/big"), ("payment.*",), filter=BIG)
    await make_endpoint(receiver.url("/all"), ("payment.*",))
    small = await send(db, account_id, "payment.created", amount=5)
    large = await send(db, account_id, "payment.created", amount=5000)

    async def arrived() -> bool:
        return len(receiver.bodies("/all")) == 2 and len(receiver.bodies("/big")) == 1

    await until(arrived, what="both events at /all, the large one at /big")
    assert [json.loads(b)["id"] for b in receiver.bodies("/big")] == [large]
    assert sorted(json.loads(b)["id"] for b in receiver.bodies("/all")) == sorted([small, large])
    # The small one has no delivery to /big: nothing could ever send it there.
    assert len(await _targets(db, small)) == 1


def _rows(conn: Connection) -> list[Any]:
    return list(conn.exec_driver_sql("SELECT * FROM webhook_endpoints").mappings())


async def test_migration_0021_goes_down_and_up_again(own_database_url: str, box: SecretBox) -> None:
    db = Database(own_database_url)
    try:
        async with db.unit_of_work() as uow:
            endpoint_id, _ = await ops.create(
                uow,
                box,
                await new_account(db),
                url="http://127.0.0.1:9/big",
                events=["*"],
                filter=BIG,
            )

        def down_and_up(conn: Connection) -> tuple[list[Any], list[Any]]:
            command.downgrade(_config(conn), "0020")
            down = _rows(conn)
            command.upgrade(_config(conn), "head")
            return down, _rows(conn)

        async with db.engine.begin() as conn:
            down, up = await conn.run_sync(down_and_up)
        await check_current(db)
    finally:
        await db.dispose()
    assert [(r["id"], "filter" in r) for r in down] == [(endpoint_id, False)]
    assert [(r["id"], r["filter"]) for r in up] == [(endpoint_id, None)]
