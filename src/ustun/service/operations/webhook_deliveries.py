"""`/v1/deliveries`: the delivery log with every attempt, and manual retry."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ustun.clock import rfc3339, rfc3339_or_none
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.service.plumbing.deps import DB, CurrentAccount, Cursor, Limit
from ustun.store import Database
from ustun.webhooks import operations
from ustun.webhooks.adapters import for_database
from ustun.webhooks.records import Delivery
from ustun.webhooks.states import Status
from ustun.webhooks.store import Attempt

router = APIRouter(prefix="/v1/deliveries", tags=["webhooks"])
Id = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_]+$")]


def render(row: Delivery) -> dict[str, Any]:
    """A delivery; `next_attempt_at` is null once it succeeded or died."""
    return {
        "id": row.id,
        "object": "delivery",
        "endpoint_id": row.endpoint_id,
        "event_id": row.event_id,
        "status": row.status,
        "attempt_count": row.attempt_count,
        "next_attempt_at": rfc3339_or_none(row.next_attempt_at),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def render_attempt(row: Attempt) -> dict[str, Any]:
    """One attempt: when, the status code (or the error), latency, the response's first 4 KiB."""
    return {
        "attempted_at": rfc3339(row.attempted_at),
        "status_code": row.status_code,
        "latency_ms": row.latency_ms,
        "response": row.response,
        "error": row.error,
    }


async def deliveries_page(
    db: Database,
    account_id: str,
    *,
    limit: int,
    cursor: str | None,
    endpoint_id: str | None = None,
    event_id: str | None = None,
    status: Status | None = None,
) -> dict[str, Any]:
    """A page of the account's deliveries, newest first, filtered by endpoint, event or status
    (the API's list and the dashboard's)."""
    async with db.read() as conn:
        found = await for_database(db).deliveries_page(
            conn,
            account_id,
            limit=limit,
            cursor=cursor,
            endpoint_id=endpoint_id,
            event_id=event_id,
            status=status,
        )
    return {"data": [render(row) for row in found.items], "next_cursor": found.next_cursor}


async def delivery_with_attempts(db: Database, account_id: str, delivery_id: str) -> dict[str, Any]:
    """One delivery with all its attempts, oldest first (the API's and the dashboard's)."""
    row, tried = await operations.read_delivery(db, account_id, delivery_id)
    return render(row) | {"attempts": [render_attempt(a) for a in tried]}


@router.get("")
async def list_deliveries(
    account: CurrentAccount,
    db: DB,
    limit: Limit = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
    endpoint_id: Id = None,
    event_id: Id = None,
    status: Status | None = None,
) -> dict[str, Any]:
    """The account's deliveries, newest first, filtered by endpoint, event or status."""
    return await deliveries_page(
        db,
        account.id,
        limit=limit,
        cursor=cursor,
        endpoint_id=endpoint_id,
        event_id=event_id,
        status=status,
    )


@router.get("/{delivery_id}")
async def get_delivery(delivery_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """One delivery with all its attempts, oldest first."""
    return await delivery_with_attempts(db, account.id, delivery_id)


@router.post("/{delivery_id}/retry", status_code=202)
async def retry_delivery(delivery_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """Send it again now, whatever its status (a new attempt; the count keeps growing)."""
    return render(await operations.retry_delivery(db, account.id, delivery_id))
