"""Payments: `GET`/`POST /v1/payments`, `GET`/`PATCH /v1/payments/{id}`, and their shape."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from sqlalchemy import ColumnElement, Row, bindparam, insert, select

from ustun import clock, ids
from ustun.clock import rfc3339
from ustun.concurrency import (
    GuardRejected,
    compare_and_set,
    require_if_match,
    validators,
)
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.errors import NotFoundError, StateConflictError
from ustun.idempotency import idempotency
from ustun.service.plumbing.accounts import Account
from ustun.service.plumbing.bodies import INTEGRAL_FLOAT, read_json
from ustun.service.plumbing.conditional import (
    Conditions,
    conditional_get,
    preconditions_of,
    representation,
)
from ustun.service.plumbing.deps import DB, CurrentAccount, Cursor, Limit, account_of, database_of
from ustun.service.plumbing.hot import hot
from ustun.service.plumbing.pagination import page
from ustun.service.plumbing.text import Text
from ustun.service.resources.money import Amount, Currency
from ustun.service.resources.schema import payments
from ustun.store.statements import FastRow, Statement
from ustun.webhooks.sending.outbox import emit

router = APIRouter(prefix="/v1/payments", tags=["payments"])


def _url(payment_id: str) -> str:
    return f"/v1/payments/{payment_id}"


# The two statements of the hot requests, compiled once (see `ustun.store.statements`).
_INSERT = Statement(
    insert(payments)
    .values({c.name: bindparam(c.name, type_=c.type) for c in payments.c})
    .returning(*payments.c)
)
_GET = Statement(
    select(payments).where(
        payments.c.account_id == bindparam("account_id"), payments.c.id == bindparam("id")
    )
)


def render(row: Row[Any] | FastRow) -> dict[str, Any]:
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
    account: CurrentAccount, db: DB, limit: Limit = DEFAULT_PAGE_SIZE, cursor: Cursor = None
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
    # The column is a signed 64-bit integer; a larger number is bad input, not a 500.
    order_id: Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1), INTEGRAL_FLOAT] | None = None
    description: Text | None = Field(default=None, max_length=1000)


# A hot route (`plumbing.hot`): its body, account and database come from the request, not from
# dependencies. Its body is documented by `specs.openapi.ROUTE_NOTES`.
@router.post("", status_code=201, openapi_extra=idempotency("required"), response_model=None)
@hot
async def create_payment(request: Request) -> Response:
    """Create a pending payment; retries with the same Idempotency-Key replay this answer."""
    body = await read_json(request, PaymentCreate)
    account = account_of(request)
    now = clock.now()
    async with database_of(request).unit_of_work() as uow:
        values = {
            "id": ids.new_id("pay"),
            "account_id": account.id,
            **body.model_dump(),
            "status": "pending",
            "version": 1,
            "created_at": now,
            "updated_at": now,
        }
        [row] = await _INSERT.rows(uow.conn, values)
        await emit(uow, account.id, "payment.created", render(row), object_url=_url(row.id))
    return representation(
        render(row), validators(row), status=201, headers={"location": _url(row.id)}
    )


class PaymentUpdate(BaseModel):
    """The one change a client may make to a payment: settle it, from `pending` only."""

    model_config = ConfigDict(extra="forbid", strict=True)

    status: Literal["succeeded", "failed", "cancelled"]


PATCH_MEDIA_TYPES = ("application/json", "application/merge-patch+json")


def _payment_key(account: Account, payment_id: str) -> list[ColumnElement[bool]]:
    return [payments.c.account_id == account.id, payments.c.id == payment_id]


@router.head("/{payment_id}", response_model=None, operation_id="head_payment")
@router.get("/{payment_id}", response_model=None)
@hot
async def get_payment(payment_id: str, request: Request) -> Response:
    """One payment with its ETag; 304 when If-None-Match matches. A hot route (`plumbing.hot`):
    the account, database and preconditions come from the request, not from dependencies."""
    params = {"account_id": account_of(request).id, "id": payment_id}
    rows = await _GET.read(database_of(request), params)
    if not rows:
        raise NotFoundError(f"No payment {payment_id!r} in this account.")
    return conditional_get(request, preconditions_of(request), validators(rows[0]), render(rows[0]))


# Its body (read by hand) is documented by `ustun.service.specs.openapi.ROUTE_NOTES`.
@router.patch("/{payment_id}", response_model=None)
async def update_payment(
    payment_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """Move a pending payment to succeeded, failed or cancelled, under `If-Match`."""
    require_if_match(pre)
    change = await read_json(request, PaymentUpdate, PATCH_MEDIA_TYPES)
    async with db.unit_of_work() as uow:
        try:
            row = await compare_and_set(
                uow.conn,
                payments,
                where=_payment_key(account, payment_id),
                pre=pre,
                values={"status": change.status, "updated_at": clock.now()},
                method="PATCH",
                guard=payments.c.status == "pending",
            )
        except GuardRejected as refused:
            raise StateConflictError(
                f"The payment is {refused.current.status}; only a pending payment can become "
                f"{change.status}.",
                current_status=refused.current.status,
            ) from None
        await emit(uow, account.id, f"payment.{row.status}", render(row), object_url=_url(row.id))
    return representation(render(row), validators(row))
