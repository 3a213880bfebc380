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

A cursor names the account's own last event the page passed (`evc_` + its id), never the
horizon: the horizon moves with every account's writes (and on PostgreSQL it is the server's
transaction counter), and positions count every account's events. So an account's cursor
tells it nothing it did not know, and stays the same while only other accounts write. A page
has read every event of the account up to the horizon, so its next one resumes after that
account's last event there, and nothing that commits later falls behind it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.webhooks.adapters import for_connection
from ustun.webhooks.records import Event

CURSOR_PREFIX = "evc_"
# A cursor is the prefix, then either an event id (what pages hand out) or, in a cursor made
# before they named events (still read, and `START`), `txid` and `seq` as 16 hex digits each.
# Both are PostgreSQL `bigint`s (at most 2**63 - 1), so the first digit of each is 0-7: every
# string this matches is a cursor, and the API's schema can say exactly which strings it takes.
_EVENT_ID = "evt_[0-9A-HJKMNP-TV-Z]{26}"
_POSITION = "[0-7][0-9a-f]{15}[0-7][0-9a-f]{15}"
CURSOR_PATTERN = f"^{CURSOR_PREFIX}(?:{_EVENT_ID}|{_POSITION})$"
_EVENT_CURSOR = re.compile(f"{CURSOR_PREFIX}(?P<event>{_EVENT_ID})")
_POSITION_CURSOR = re.compile(f"{CURSOR_PREFIX}{_POSITION}")


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where an event sits in the feed: ordered by `txid`, then `seq`; `event` is the id of
    the account's event there, when the position is one."""

    txid: int
    seq: int
    event: str | None = field(default=None, compare=False)

    @property
    def cursor(self) -> str:
        """The opaque cursor a client sends back as `after`: the event, else the position."""
        if self.event is not None:
            return CURSOR_PREFIX + self.event
        return f"{CURSOR_PREFIX}{self.txid:016x}{self.seq:016x}"

    @classmethod
    def parse(cls, cursor: str) -> Position:
        """The position of a cursor that names one (not an event); `ValueError` otherwise."""
        if not _POSITION_CURSOR.fullmatch(cursor):
            raise ValueError("not an event cursor")
        digits = cursor.removeprefix(CURSOR_PREFIX)
        return cls(int(digits[:16], 16), int(digits[16:], 16))


START = Position(0, 0)


async def locate(conn: AsyncConnection, account_id: str, cursor: str) -> Position:
    """Where a cursor of this account's feed points; `ValueError` for anything else (an event
    of another account included)."""
    named = _EVENT_CURSOR.fullmatch(cursor)
    if named is None:
        return Position.parse(cursor)
    found = await for_connection(conn).feed_position(conn, account_id, named["event"])
    if found is None:
        raise ValueError("not an event cursor")
    return Position(*found, named["event"])


@dataclass(frozen=True, slots=True)
class Page:
    """Events in feed order, and the position to read on from (never behind `after`)."""

    rows: list[Event]
    next: Position


async def horizon(conn: AsyncConnection) -> Position:
    """The position at or below which every event has committed, or never will."""
    return Position(*await for_connection(conn).feed_horizon(conn))


async def read(
    conn: AsyncConnection,
    account_id: str,
    *,
    after: Position,
    limit: int,
    event_type: str | None = None,
    since: datetime | None = None,
) -> Page:
    """Up to `limit` of the account's events after `after`, below the horizon, in feed order
    (only of `event_type`, only created since `since`, when given).

    A full page continues from its last event; a short one has read everything below the
    horizon, so it continues from the account's last event there, filtered out or not (those
    are not read again), or stays at `after` when there is none.
    """
    top = await horizon(conn)
    rows = await for_connection(conn).feed_events(
        conn,
        account_id,
        after=(after.txid, after.seq),
        upto=(top.txid, top.seq),
        limit=limit,
        event_type=event_type,
        since=since,
    )
    if len(rows) == limit or (rows and event_type is None and since is None):
        return Page(rows, Position(rows[-1].txid, rows[-1].seq, rows[-1].id))
    return Page(rows, await _last_event(conn, account_id, after, top) or after)


async def _last_event(
    conn: AsyncConnection, account_id: str, after: Position, upto: Position
) -> Position | None:
    """Where the account's last event in `(after, upto]` is, of any type and time."""
    found = await for_connection(conn).feed_last(
        conn, account_id, after=(after.txid, after.seq), upto=(upto.txid, upto.seq)
    )
    if found is None:
        return None
    event_id, txid, seq = found
    return Position(txid, seq, event_id)
