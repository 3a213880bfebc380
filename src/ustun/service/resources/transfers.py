"""Transfers: move money between two ledger accounts of the caller in one transaction."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import Row, insert, select, update

from ustun import clock, ids
from ustun.clock import rfc3339
from ustun.errors import ProblemError
from ustun.idempotency import idempotency
from ustun.service.plumbing.deps import DB, CurrentAccount
from ustun.service.plumbing.text import Text
from ustun.service.resources.money import MAX_AMOUNT, Amount, Currency
from ustun.service.resources.schema import ledger_accounts, transfers
from ustun.store.uow import Hook
from ustun.webhooks.sending.outbox import emit

router = APIRouter(prefix="/v1/transfers", tags=["transfers"])


def render(row: Row[Any]) -> dict[str, Any]:
    """The public JSON shape of a transfer row."""
    return {
        "id": row.id,
        "object": "transfer",
        "from": row.from_id,
        "to": row.to_id,
        "amount": row.amount,
        "currency": row.currency,
        "created_at": rfc3339(row.created_at),
    }


class TransferCreate(BaseModel):
    """The body of `POST /v1/transfers`."""

    model_config = ConfigDict(extra="forbid")

    source: Text = Field(alias="from", min_length=1, max_length=64)
    target: Text = Field(alias="to", min_length=1, max_length=64)
    amount: Amount
    currency: Currency

    @model_validator(mode="after")
    def _distinct(self) -> TransferCreate:
        if self.source == self.target:
            raise ValueError("`from` and `to` must be different ledger accounts")
        return self


def _move(ledger_id: str, delta: int) -> Any:
    """Add `delta` to one balance only if the result stays in 0..MAX_AMOUNT: the bound is in the
    UPDATE's own WHERE, so no concurrent write can slip between a check and the change."""
    balance = ledger_accounts.c.balance
    bound = balance >= -delta if delta < 0 else balance <= MAX_AMOUNT - delta
    return (
        update(ledger_accounts)
        .where(ledger_accounts.c.id == ledger_id, bound)
        .values(balance=balance + delta, version=ledger_accounts.c.version + 1)
    )


@router.post("", status_code=201, openapi_extra=idempotency("required"), response_model=None)
async def create_transfer(
    body: TransferCreate, request: Request, account: CurrentAccount, db: DB
) -> JSONResponse:
    """Debit `from` and credit `to` atomically; 409 `insufficient-funds` if `from` is short,
    409 `balance-limit-exceeded` if `to` would pass MAX_AMOUNT (nothing moved in either case)."""
    between_moves: Hook | None = request.app.state.between_transfer_moves
    async with db.unit_of_work() as uow:
        # Lock both rows in id order, so two opposite transfers cannot deadlock (PostgreSQL).
        rows = (
            await uow.conn.execute(
                select(ledger_accounts.c.id, ledger_accounts.c.currency, ledger_accounts.c.balance)
                .where(
                    ledger_accounts.c.id.in_([body.source, body.target]),
                    ledger_accounts.c.account_id == account.id,
                )
                .order_by(ledger_accounts.c.id)
                .with_for_update()
            )
        ).all()
        found = {row.id: row for row in rows}
        for field, ledger_id in (("from", body.source), ("to", body.target)):
            if ledger_id not in found:
                raise ProblemError("not-found", f"No ledger account {ledger_id!r} (`{field}`).")
            if found[ledger_id].currency != body.currency:
                raise ProblemError(
                    "validation-error",
                    f"Ledger account `{field}` holds {found[ledger_id].currency}, "
                    f"not {body.currency}.",
                    errors=[
                        {
                            "field": "body.currency",
                            "message": f"must match the currency of `{field}`",
                            "type": "currency_mismatch",
                        }
                    ],
                )
        debited = await uow.conn.execute(_move(body.source, -body.amount))
        if debited.rowcount == 0:
            balance = found[body.source].balance
            raise ProblemError(
                "insufficient-funds",
                f"Ledger account {body.source!r} holds {balance}, less than {body.amount}.",
                balance=balance,
            )
        if between_moves is not None:
            await between_moves()
        credited = await uow.conn.execute(_move(body.target, body.amount))
        if credited.rowcount == 0:
            balance = found[body.target].balance
            raise ProblemError(
                "balance-limit-exceeded",
                f"Ledger account {body.target!r} holds {balance}; {body.amount} more would pass "
                f"{MAX_AMOUNT}, the largest balance.",
                balance=balance,
                max_balance=MAX_AMOUNT,
            )
        row = (
            await uow.conn.execute(
                insert(transfers)
                .values(
                    id=ids.new_id("tr"),
                    account_id=account.id,
                    from_id=body.source,
                    to_id=body.target,
                    amount=body.amount,
                    currency=body.currency,
                    created_at=clock.now(),
                )
                .returning(*transfers.c)
            )
        ).one()
        await emit(uow, account.id, "transfer.completed", render(row), object_url=_url(row.id))
    return JSONResponse(render(row), status_code=201, headers={"location": _url(row.id)})


def _url(transfer_id: str) -> str:
    return f"/v1/transfers/{transfer_id}"


@router.get("/{transfer_id}", response_model=None)
async def get_transfer(transfer_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """One transfer of the caller."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(transfers).where(
                    transfers.c.id == transfer_id, transfers.c.account_id == account.id
                )
            )
        ).first()
    if row is None:
        raise ProblemError("not-found", f"No transfer {transfer_id!r}.")
    return render(row)
