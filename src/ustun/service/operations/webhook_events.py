"""`/v1/events` (the event log a receiver reconciles against) and `/v1/event-types`."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import Row, select

from ustun.clock import rfc3339
from ustun.http.errors import ProblemError
from ustun.service.plumbing.deps import DB, DEFAULT_PAGE, CurrentAccount, Cursor, Limit
from ustun.service.plumbing.pagination import page
from ustun.service.specs.event_types import CATALOGUE
from ustun.webhooks.message import API_VERSION
from ustun.webhooks.tables import events

router = APIRouter(tags=["webhooks"])


def render_event(row: Row[Any]) -> dict[str, Any]:
    """An event as the log shows it (the same fields a receiver gets, plus `object`)."""
    return {
        "id": row.id,
        "object": "event",
        "type": row.type,
        "created_at": rfc3339(row.created_at),
        "api_version": API_VERSION,
        "data": json.loads(row.data),
    }


@router.get("/v1/events")
async def list_events(
    account: CurrentAccount,
    db: DB,
    limit: Limit = DEFAULT_PAGE,
    cursor: Cursor = None,
    type: Annotated[str | None, Query(max_length=100, description="Only this type.")] = None,
) -> dict[str, Any]:
    """The account's events, newest first, optionally of one type."""
    where = [events.c.account_id == account.id]
    if type is not None:
        where.append(events.c.type == type)
    async with db.read() as conn:
        return await page(
            conn, events, where=where, limit=limit, cursor=cursor, render=render_event
        )


@router.get("/v1/events/{event_id}")
async def get_event(event_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """One event."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(events).where(events.c.id == event_id, events.c.account_id == account.id)
            )
        ).first()
    if row is None:
        raise ProblemError("not-found", f"No event {event_id}.")
    return render_event(row)


@router.get("/v1/event-types")
async def list_event_types() -> dict[str, Any]:
    """The catalogue: every event type with the JSON Schema of its `data`."""
    data = [{"name": t.name, "description": t.description, "schema": t.schema} for t in CATALOGUE]
    return {"data": data, "next_cursor": None}
