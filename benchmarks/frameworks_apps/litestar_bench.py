"""benchmarks/frameworks.py's Litestar app (ustun's `Database`, served by uvicorn): `POST
/<variant>/payments` writes the payment and its event in one transaction, in the variant
`BENCH_VARIANT` names, on the database at `BENCH_DATABASE_URL`. Every variant writes through a
unit of work of the same `Database` (asyncpg or aiosqlite, the same pools):

(a) by hand, no idempotency: the payment and a row of the app's own outbox table;
(b) (a) with ustun's own statements run by hand, as `UstunPlugin`'s middleware runs them: the
    key's lock and read (`SqlRecordStore.look`: on PostgreSQL `lock_key` in the transaction, on
    SQLite a read before it), the payment, `emit`, the record (`settle_in`: `settle_key`), in
    one transaction (`Database.hold`): the ceiling of ustun's SQL shape;
(c) ustun: `UstunPlugin` with `opt={"idempotency": "required"}`, the `uow` dependency and
    `emit`.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from bench_tables import ACCOUNT, TTL, events, payments
from litestar import Litestar, Request, Response, post
from sqlalchemy import insert

from ustun.http.fingerprint import fingerprint
from ustun.idempotency.records import StoredResponse
from ustun.idempotency.sql import SqlRecordStore
from ustun.litestar import UstunPlugin
from ustun.store import Database, UnitOfWork
from ustun.store.accounts import account_id
from ustun.store.plans import run
from ustun.webhooks.sending.outbox import emit

VARIANT = os.environ["BENCH_VARIANT"]
db = Database(os.environ["BENCH_DATABASE_URL"])
store = SqlRecordStore(db)
_ACCOUNT: dict[str, str] = {}  # the account's id, looked up at startup
JSON = "application/json"


async def _account() -> None:
    async with db.unit_of_work() as uow:
        _ACCOUNT["id"] = await run(account_id(ACCOUNT), uow.conn)


async def _dispose() -> None:
    await db.dispose()


async def _pay(uow: UnitOfWork, data: dict[str, Any]) -> dict[str, Any]:
    amount, currency = int(data["amount"]), str(data["currency"])
    written = await uow.conn.execute(
        insert(payments).values(amount=amount, currency=currency).returning(payments.c.id)
    )
    return {"id": written.scalar_one(), "amount": amount, "currency": currency}


@post("/a/payments")
async def plain(data: dict[str, Any]) -> dict[str, Any]:
    async with db.unit_of_work() as uow:
        paid = await _pay(uow, data)
        await uow.conn.execute(insert(events).values(type="payment.created", data=paid))
    return paid


class _Rollback(Exception):
    pass


@post("/b/payments")
async def by_hand(request: Request[Any, Any, Any]) -> Response[Any]:
    key = request.headers.get("idempotency-key")
    if not key:
        return Response({"detail": "Idempotency-Key required"}, status_code=400)
    body = await request.body()
    print_ = fingerprint("POST", request.url.path, request.scope["query_string"], body)
    try:
        async with db.hold() as held:
            lookup = await store.look(held, "", key)
            if lookup.record is not None or not lookup.held:
                raise _Rollback
            uow = await held.begin()
            paid = await _pay(uow, msgspec.json.decode(body))
            await emit(uow, _ACCOUNT["id"], "payment.created", paid)
            content = msgspec.json.encode(paid)
            stored = StoredResponse(201, (("content-type", JSON),), content)
            if await store.settle_in(uow, "", key, print_, stored, ttl=TTL) is not None:
                raise _Rollback
    except _Rollback:
        return Response({"detail": "replay or in progress"}, status_code=409)
    return Response(content, status_code=201, media_type=JSON)


@post("/c/payments", opt={"idempotency": "required"})
async def with_ustun(data: dict[str, Any], uow: UnitOfWork) -> dict[str, Any]:
    paid = await _pay(uow, data)
    await emit(uow, _ACCOUNT["id"], "payment.created", paid)
    return paid


app = Litestar(
    [{"a": plain, "b": by_hand, "c": with_ustun}[VARIANT]],
    plugins=[UstunPlugin(db)] if VARIANT == "c" else [],
    on_startup=[_account],
    on_shutdown=[] if VARIANT == "c" else [_dispose],
)
