"""A Litestar app with `UstunPlugin`: `POST /payments` (key required) writes a payment through
the injected unit of work; `POST /raise` writes one, then raises; `GET /payments/{id}` is a 404
problem when there is none. `python litestar_shop.py` creates its table."""

from __future__ import annotations

import asyncio
import os

from litestar import Litestar, get, post
from sqlalchemy import Column, Integer, MetaData, Table, insert, select

from ustun.errors import NotFoundError
from ustun.litestar import UstunPlugin
from ustun.store import Database, UnitOfWork

db = Database(os.environ["LITESTAR_DATABASE_URL"])
payments = Table(
    "litestar_payment",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("amount", Integer, nullable=False),
)


async def _pay(uow: UnitOfWork, amount: int) -> dict[str, int]:
    found = await uow.conn.execute(insert(payments).values(amount=amount).returning(payments.c.id))
    return {"id": found.scalar_one(), "amount": amount}


@post("/payments", opt={"idempotency": "required"})
async def pay(data: dict[str, int], uow: UnitOfWork) -> dict[str, int]:
    return await _pay(uow, data["amount"])


@post("/raise", opt={"idempotency": "required"})
async def fail(data: dict[str, int], uow: UnitOfWork) -> dict[str, int]:
    await _pay(uow, data["amount"])
    raise RuntimeError("the handler failed after writing")


@get("/payments/{payment_id:int}")
async def payment(payment_id: int, uow: UnitOfWork) -> dict[str, int]:
    found = await uow.conn.execute(select(payments).where(payments.c.id == payment_id))
    row = found.first()
    if row is None:
        raise NotFoundError(f"No payment {payment_id}.")
    return {"id": row.id, "amount": row.amount}


app = Litestar([pay, fail, payment], plugins=[UstunPlugin(db)])


async def create_table() -> None:
    async with db.unit_of_work() as uow:
        await uow.conn.run_sync(payments.metadata.create_all)
    await db.dispose()


if __name__ == "__main__":
    asyncio.run(create_table())
