"""Payments: `GET /v1/payments`, `POST /v1/payments` and the shape of a payment."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from sqlalchemy import Row, insert

from ustun import clock, ids
from ustun.clock import rfc3339
from ustun.http.etag import version_etag
from ustun.idempotency import idempotency
from ustun.service.deps import DB, DEFAULT_PAGE, CurrentAccount, Cursor, Limit
from ustun.service.money import Amount, Currency
from ustun.service.pagination import page
from ustun.service.tables import payments

router = APIRouter(prefix="/v1/payments", tags=["payments"])


def render(row: Row[Any]) -> dict[str, Any]:
    """The public JSON shape of a payment row."""
    return {
        "id": row.id,
        "object": "payment",
        "amount": row.amount,
        "currency": row.currency,
        "order_id": row.order_id,
        "description": row.description,
        "status": row.status,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


@router.get("")
async def list_payments(
    account: CurrentAccount, db: DB, limit: Limit = DEFAULT_PAGE, cursor: Cursor = None
) -> dict[str, Any]:
    """The account's payments, newest first."""
    async with db.read() as conn:
        return await page(
            conn,
            payments,
            where=[payments.c.account_id == account.id],
            limit=limit,
            cursor=cursor,
            render=render,
        )


class PaymentCreate(BaseModel):
    """The body of `POST /v1/payments`."""

    model_config = ConfigDict(extra="forbid")

    amount: Amount
    currency: Currency
    order_id: StrictInt | None = None
    description: str | None = Field(default=None, max_length=1000)


@router.post("", status_code=201, openapi_extra=idempotency("required"), response_model=None)
async def create_payment(body: PaymentCreate, account: CurrentAccount, db: DB) -> JSONResponse:
    """Create a pending payment; retries with the same Idempotency-Key replay this answer."""
    now = clock.now()
    async with db.unit_of_work() as uow:
        row = (
            await uow.conn.execute(
                insert(payments)
                .values(
                    id=ids.new_id("pay"),
                    account_id=account.id,
                    **body.model_dump(),
                    status="pending",
                    version=1,
                    created_at=now,
                    updated_at=now,
                )
                .returning(*payments.c)
            )
        ).one()
    return JSONResponse(
        render(row),
        status_code=201,
        headers={"location": f"/v1/payments/{row.id}", "etag": version_etag(row.version)},
    )
