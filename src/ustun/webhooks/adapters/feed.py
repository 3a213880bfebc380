"""The event feed: an account's events in a stable order, after an opaque cursor that never
skips an event, however late it commits.

A cursor on an id or sequence taken before commit can skip: transaction A takes position 5,
B takes 6 and commits, a reader pages past 6, then A commits 5 behind the cursor. So an
event's position is `(txid, seq)`, set by the database on insert (migration 0010), and a page
only reads up to the *horizon*, a position no event still uncommitted can fall at or below:

- PostgreSQL: `txid` is the inserting transaction's id. Every transaction older than the
  oldest one still running, `pg_snapshot_xmin(pg_current_snapshot())`, has finished, so the
  horizon is `(xmin - 1, ∞)`. A long transaction delays the feed; it never makes it skip.
- SQLite: writes are serialised, and `seq` is the largest so far plus one, taken in the writing
  transaction, so seq order is commit order: the horizon is the largest `seq` committed.

The horizon is read before the page, so the page's snapshot sees every event below it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Row, func, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.webhooks.tables import events

CURSOR_PREFIX = "evc_"
# A cursor: the prefix, then `txid` and `seq` as 16 hex digits each. Both are PostgreSQL
# `bigint`s (at most 2**63 - 1), so the first digit of each is 0-7: every string this matches
# is a position, and the API's schema can say exactly which strings it takes.
CURSOR_PATTERN = f"^{CURSOR_PREFIX}[0-7][0-9a-f]{{15}}[0-7][0-9a-f]{{15}}$"
_CURSOR = re.compile(CURSOR_PATTERN)
_MAX_SEQ = 2**63 - 1
_PG_HORIZON = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where an event sits in the feed: ordered by `txid`, then `seq`."""

    txid: int
    seq: int

    @property
    def cursor(self) -> str:
        """The opaque cursor a client sends back as `after`."""
        return f"{CURSOR_PREFIX}{self.txid:016x}{self.seq:016x}"

    @classmethod
    def parse(cls, cursor: str) -> Position:
        """The position of a cursor this module made; `ValueError` for anything else."""
        if not _CURSOR.fullmatch(cursor):
            raise ValueError("not an event cursor")
        digits = cursor.removeprefix(CURSOR_PREFIX)
        return cls(int(digits[:16], 16), int(digits[16:], 16))


START = Position(0, 0)


@dataclass(frozen=True, slots=True)
class Page:
    """Events in feed order, and the position to read on from (never behind `after`)."""

    rows: Sequence[Row[Any]]
    next: Position


async def horizon(conn: AsyncConnection) -> Position:
    """The position at or below which every event has committed, or never will."""
    if conn.dialect.name == "postgresql":
        oldest_running: int = await conn.scalar(_PG_HORIZON)
        return Position(oldest_running - 1, _MAX_SEQ)
    largest = await conn.scalar(select(func.coalesce(func.max(events.c.seq), 0)))
    return Position(0, int(largest or 0))


async def read(
    conn: AsyncConnection,
    where: Sequence[ColumnElement[bool]],
    *,
    after: Position,
    limit: int,
) -> Page:
    """Up to `limit` events matching `where` after `after`, below the horizon, in feed order.

    A full page continues from its last event; a short one has read everything below the
    horizon, so it continues from there (filtered-out events are not read again).
    """
    top = await horizon(conn)
    position = tuple_(events.c.txid, events.c.seq)
    rows = (
        await conn.execute(
            select(events)
            .where(
                *where,
                position > tuple_(after.txid, after.seq),
                position <= tuple_(top.txid, top.seq),
            )
            .order_by(events.c.txid, events.c.seq)
            .limit(limit)
        )
    ).all()
    if len(rows) == limit:
        return Page(rows, Position(rows[-1].txid, rows[-1].seq))
    return Page(rows, max(after, top))
