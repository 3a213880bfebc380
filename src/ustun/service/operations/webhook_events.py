"""`/v1/events`: the event log a receiver reconciles against (the catalogue of event types is
`ustun.service.specs.event_catalogue`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.clock import rfc3339
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.errors import ProblemError
from ustun.service.plumbing.bodies import Moment
from ustun.service.plumbing.deps import DB, CurrentAccount, Cursor, Limit
from ustun.store import Database
from ustun.webhooks import feed, retention
from ustun.webhooks.adapters import for_database
from ustun.webhooks.records import Event
from ustun.webhooks.sending.message import API_VERSION

router = APIRouter(tags=["webhooks"])

After = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Read the feed (oldest first, commit-safe): a `next_cursor` of an earlier "
        "feed page, or `0` for the beginning. Never skips an event that commits later.",
        # Documented, checked by `_position` (a 400 `event-cursor-invalid`, not a 422).
        json_schema_extra={"pattern": f"^0$|{feed.CURSOR_PATTERN}"},
    ),
]
Since = Annotated[
    Moment | None,
    Query(description="Read the feed from the events created at or after this time (RFC 3339)."),
]


def render_event(row: Event) -> dict[str, Any]:
    """An event as the log shows it (the same fields a receiver gets, plus `object`); an
    expunged one with `data: null` and its `expunged_at`."""
    shown = {
        "id": row.id,
        "object": "event",
        "type": row.type,
        "created_at": rfc3339(row.created_at),
        "api_version": API_VERSION,
        "data": None if row.expunged_at is not None else json.loads(row.data),
    }
    if row.expunged_at is not None:
        shown["expunged_at"] = rfc3339(row.expunged_at)
    return shown


@router.get("/v1/events")
async def list_events(
    account: CurrentAccount,
    db: DB,
    limit: Limit = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
    type: Annotated[str | None, Query(max_length=100, description="Only this type.")] = None,
    after: After = None,
    since: Since = None,
) -> dict[str, Any]:
    """The account's events, newest first, optionally of one type; with `after` or `since`,
    the feed a receiver reconciles against: oldest first, and `next_cursor` always set."""
    if after is not None or since is not None:
        async with db.read() as conn:
            found = await feed.read(
                conn,
                account.id,
                after=await _position(conn, account.id, after),
                limit=limit,
                event_type=type,
                since=since,
            )
        return {"data": [render_event(r) for r in found.rows], "next_cursor": found.next.cursor}
    return await events_page(db, account.id, limit=limit, cursor=cursor, type=type)


async def events_page(
    db: Database, account_id: str, *, limit: int, cursor: str | None, type: str | None = None
) -> dict[str, Any]:
    """A page of the account's events, newest first, optionally of one type (the API's list
    and the dashboard's)."""
    async with db.read() as conn:
        found = await for_database(db).events_page(
            conn, account_id, limit=limit, cursor=cursor, event_type=type
        )
    return {"data": [render_event(row) for row in found.items], "next_cursor": found.next_cursor}


async def _position(conn: AsyncConnection, account_id: str, after: str | None) -> feed.Position:
    """The feed position of an `after` cursor (`0` or absent: the beginning)."""
    if after is None or after == "0":
        return feed.START
    try:
        return await feed.locate(conn, account_id, after)
    except ValueError:
        raise ProblemError(
            "event-cursor-invalid",
            "`after` must be a `next_cursor` of an earlier feed page of /v1/events, or `0`.",
        ) from None


async def read_event(db: Database, account_id: str, event_id: str) -> dict[str, Any]:
    """One event of the account, else 404 (the API's and the dashboard's)."""
    async with db.read() as conn:
        row = await for_database(db).account_event(conn, account_id, event_id)
    if row is None:
        raise ProblemError("not-found", f"No event {event_id}.")
    return render_event(row)


@router.get("/v1/events/{event_id}")
async def get_event(event_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """One event."""
    return await read_event(db, account.id, event_id)


@router.post("/v1/events/{event_id}/expunge")
async def expunge_event(event_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """Expunge the event's payload now, as retention would later (again: the same answer).
    Its attempts' response bodies go too; ids, type, times and outcomes stay, and it is never
    sent again."""
    return render_event(await retention.expunge_event(db, account.id, event_id))
