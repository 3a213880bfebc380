"""Ledger accounts: a balance in one currency that transfers move money between."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict
from sqlalchemy import Row, insert, select

from ustun import clock, ids
from ustun.clock import rfc3339
from ustun.concurrency import validators
from ustun.errors import ProblemError
from ustun.service.plumbing.conditional import Conditions, conditional_get, representation
from ustun.service.plumbing.deps import DB, CurrentAccount
from ustun.service.resources.money import Balance, Currency
from ustun.service.resources.schema import ledger_accounts

router = APIRouter(prefix="/v1/ledger-accounts", tags=["ledger accounts"])


def render(row: Row[Any]) -> dict[str, Any]:
    """The public JSON shape of a ledger account row."""
    return {
        "id": row.id,
        "object": "ledger_account",
        "currency": row.currency,
        "balance": row.balance,
        "created_at": rfc3339(row.created_at),
    }


class LedgerAccountCreate(BaseModel):
    """The body of `POST /v1/ledger-accounts`."""

    model_config = ConfigDict(extra="forbid")

    currency: Currency
    balance: Balance


@router.post("", status_code=201, response_model=None)
async def create_ledger_account(
    body: LedgerAccountCreate, account: CurrentAccount, db: DB
) -> Response:
    """Open a ledger account with an initial balance."""
    async with db.unit_of_work() as uow:
        row = (
            await uow.conn.execute(
                insert(ledger_accounts)
                .values(
                    id=ids.new_id("la"),
                    account_id=account.id,
                    currency=body.currency,
                    balance=body.balance,
                    version=1,
                    created_at=clock.now(),
                )
                .returning(*ledger_accounts.c)
            )
        ).one()
    return representation(
        render(row),
        validators(row),
        status=201,
        headers={"location": f"/v1/ledger-accounts/{row.id}"},
    )


@router.get("/{ledger_account_id}", response_model=None)
async def get_ledger_account(
    ledger_account_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """One ledger account of the caller, with its current balance; ETag / 304."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(ledger_accounts).where(
                    ledger_accounts.c.id == ledger_account_id,
                    ledger_accounts.c.account_id == account.id,
                )
            )
        ).first()
    if row is None:
        raise ProblemError("not-found", f"No ledger account {ledger_account_id!r}.")
    return conditional_get(request, pre, validators(row), render(row))
