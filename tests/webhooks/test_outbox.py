"""The outbox commits with the business write, or not at all."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, update

from ustun.store import Database
from ustun.webhooks.patterns import matches
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import deliveries, endpoints, events
from webhook_support import MakeEndpoint


async def _counts(db: Database, account_id: str) -> tuple[int, int]:
    async with db.read() as conn:
        n_events = await conn.scalar(
            select(func.count()).select_from(events).where(events.c.account_id == account_id)
        )
        n_deliveries = await conn.scalar(
            select(func.count())
            .select_from(deliveries)
            .where(deliveries.c.account_id == account_id)
        )
    return int(n_events or 0), int(n_deliveries or 0)


async def test_rolled_back_unit_of_work_emits_nothing(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint("https://hooks.example.com/a")
    with pytest.raises(RuntimeError, match="business rule"):
        async with db.unit_of_work() as uow:
            await emit(uow, account_id, "payment.created", {"id": "pay_1"})
            raise RuntimeError("business rule broke after the emit")
    assert await _counts(db, account_id) == (0, 0)


async def test_one_delivery_per_matching_enabled_endpoint(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    await make_endpoint("https://hooks.example.com/all", ("*",))
    await make_endpoint("https://hooks.example.com/pay", ("payment.*",))
    await make_endpoint("https://hooks.example.com/tr", ("transfer.completed",))
    async with db.unit_of_work() as uow:
        await emit(uow, account_id, "payment.created", {"id": "pay_1"})
        await emit(uow, account_id, "transfer.completed", {"id": "tr_1"})
        await emit(uow, account_id, "document.created", {"id": "doc_1"})
    assert await _counts(db, account_id) == (3, 2 + 2 + 1)


async def test_the_fan_out_in_sql_selects_what_the_filters_select(
    db: Database, account_id: str, make_endpoint: MakeEndpoint
) -> None:
    filters = [
        ("payment.*",),
        ("payment.created",),
        ("payment",),
        ("pay.*",),
        ("payment.created.*",),
        ("transfer.*", "payment.failed"),
        ("*",),
    ]
    made = {
        (await make_endpoint(f"https://hooks.example.com/{i}", f))[0]: f
        for i, f in enumerate(filters)
    }
    off, _ = await make_endpoint("https://hooks.example.com/off", ("*",))
    async with db.unit_of_work() as uow:
        await uow.conn.execute(update(endpoints).where(endpoints.c.id == off).values(enabled=False))
    types = [
        "payment.created",
        "payment",
        "payments.created",
        "payment.created.late",
        "transfer.completed",
        "payment.failed",
        "paymentx.created",
    ]
    async with db.unit_of_work() as uow:
        sent = {t: await emit(uow, account_id, t, {}) for t in types}
        ping = await emit(uow, account_id, "ping", {}, endpoint_id=next(iter(made)))
    async with db.read() as conn:
        rows = (
            await conn.execute(
                select(deliveries.c.event_id, deliveries.c.endpoint_id).where(
                    deliveries.c.event_id.in_([*sent.values(), ping])
                )
            )
        ).all()
    got = {(r.event_id, r.endpoint_id) for r in rows}
    want = {(sent[t], e) for t in types for e, f in made.items() if matches(f, t)}
    assert got == want | {(ping, next(iter(made)))}
