"""Payments: `GET /v1/payments` and the shape of a payment."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlalchemy import Row

from ustun.clock import rfc3339
from ustun.service.deps import DB, DEFAULT_PAGE, CurrentAccount, Cursor, Limit
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
