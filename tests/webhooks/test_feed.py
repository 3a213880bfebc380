"""The event feed: commit-safe positions, cursors, and pages that never skip a late commit."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock, ids
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.webhooks import feed
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import events
from webhook_support import until


@pytest.fixture
async def pg_account_id(pg: Database) -> str:
    """An account of its own on PostgreSQL (the late-commit cases exist only there: SQLite
    serialises writers, so one could not commit while another is held open)."""
    account = await account_for_key(pg, await create_key(pg, f"feed-{uuid.uuid4().hex[:12]}"))
    assert account is not None
    return account.id


def test_cursors_round_trip_and_refuse_anything_else() -> None:
    for position in (feed.START, feed.Position(1, 2), feed.Position(2**62, 2**63 - 1)):
        assert feed.Position.parse(position.cursor) == position
        assert position.cursor.startswith("evc_")
    assert feed.Position(5, 1) > feed.Position(4, 9) > feed.Position(4, 8)
    made = feed.Position(7, 7).cursor
    too_big = "evc_8" + "0" * 31  # txid 2**63: no PostgreSQL bigint
    upper = "evc_" + feed.Position(10, 11).cursor[4:].upper()
    for bad in (
        "",
        "0",
        "evc_",
        made[4:],
        made[:-2],
        made + "00",
        "xyz_" + made[4:],
        too_big,
        upper,
    ):
        with pytest.raises(ValueError, match="not an event cursor"):
            feed.Position.parse(bad)


async def _emit(db: Database, account_id: str, n: int, event_type: str = "payment.created") -> str:
    async with db.unit_of_work() as uow:
        return await emit(uow, account_id, event_type, {"id": f"pay_{n}"})


async def _all(db: Database, account_id: str, after: feed.Position, limit: int) -> list[str]:
    """Every event id the feed gives after `after`, page by page."""
    seen: list[str] = []
    while True:
        async with db.read() as conn:
            page = await feed.read(conn, account_id, after=after, limit=limit)
        seen += [row.id for row in page.rows]
        assert page.next >= after
        after = page.next
        if len(page.rows) < limit:
            return seen


async def _all_soon(
    db: Database, account_id: str, after: feed.Position, limit: int, expected: list[str]
) -> None:
    """Wait until the feed after `after` gives exactly `expected`: on PostgreSQL any other
    transaction still open on the server (other tests' included) holds the horizon back."""

    async def arrived() -> bool:
        found = await _all(db, account_id, after, limit)
        assert found == expected[: len(found)], found
        return found == expected

    await until(arrived, within=60, what=f"the feed to give {expected}")


async def test_pages_give_every_event_once_in_commit_order(db: Database, account_id: str) -> None:
    emitted = [await _emit(db, account_id, n) for n in range(7)]
    await _all_soon(db, account_id, feed.START, 3, emitted)
    await _all_soon(db, account_id, feed.START, 100, emitted)


async def test_a_short_page_moves_the_cursor_to_the_accounts_last_event(
    db: Database, account_id: str
) -> None:
    first = await _emit(db, account_id, 1)
    await _all_soon(db, account_id, feed.START, 5, [first])
    async with db.read() as conn:
        page = await feed.read(conn, account_id, after=feed.START, limit=5)
    assert [r.id for r in page.rows] == [first]
    assert page.next == feed.Position(page.rows[0].txid, page.rows[0].seq)
    assert page.next.cursor == f"evc_{first}"
    later = await _emit(db, account_id, 2)
    await _all_soon(db, account_id, page.next, 5, [later])


async def test_an_event_committed_late_is_not_skipped(pg: Database, pg_account_id: str) -> None:
    """A emits first and holds its transaction open; B emits after it and commits first. A
    reader that pages meanwhile must not move past A's place: A appears once it commits."""
    before = await _emit(pg, pg_account_id, 0)
    a_emitted, release_a = asyncio.Event(), asyncio.Event()
    late: list[str] = []

    async def a() -> None:
        async with pg.unit_of_work() as uow:
            late.append(await emit(uow, pg_account_id, "payment.created", {"id": "pay_a"}))
            a_emitted.set()
            await release_a.wait()

    await _all_soon(pg, pg_account_id, feed.START, 2, [before])
    holding = asyncio.create_task(a())
    await asyncio.wait_for(a_emitted.wait(), 10)
    b = await _emit(pg, pg_account_id, 2)
    async with pg.read() as conn:
        page = await feed.read(conn, pg_account_id, after=feed.START, limit=2)
    assert [r.id for r in page.rows] == [before]  # B is held back behind A, not handed out
    release_a.set()
    await asyncio.wait_for(holding, 10)
    await _all_soon(pg, pg_account_id, page.next, 2, [late[0], b])


async def test_an_event_whose_transaction_began_later_is_not_skipped_either(
    pg: Database, pg_account_id: str
) -> None:
    """B gets its transaction id first and commits first; A, younger, commits after a reader
    has paged past B: A still follows B in the feed."""
    b_emitted, release_b, a_emitted = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ids: dict[str, str] = {}

    async def b() -> None:
        async with pg.unit_of_work() as uow:
            ids["b"] = await emit(uow, pg_account_id, "payment.created", {"id": "pay_b"})
            b_emitted.set()
            await release_b.wait()

    async def a() -> None:
        await b_emitted.wait()
        async with pg.unit_of_work() as uow:
            ids["a"] = await emit(uow, pg_account_id, "payment.created", {"id": "pay_a"})
            a_emitted.set()
            await release_a.wait()

    release_a = asyncio.Event()
    tasks = [asyncio.create_task(b()), asyncio.create_task(a())]
    await asyncio.wait_for(a_emitted.wait(), 10)
    release_b.set()
    await asyncio.wait_for(tasks[0], 10)
    await _all_soon(pg, pg_account_id, feed.START, 10, [ids["b"]])
    async with pg.read() as conn:
        page = await feed.read(conn, pg_account_id, after=feed.START, limit=10)
    assert [r.id for r in page.rows] == [ids["b"]]
    release_a.set()
    await asyncio.wait_for(tasks[1], 10)
    await _all_soon(pg, pg_account_id, page.next, 10, [ids["a"]])


async def _explained(db: Database, conn: AsyncConnection, statement: str, params: Any) -> str:
    """The database's plan of `statement` (as the driver received it), as text."""
    driver = await conn.get_raw_connection()
    if db.is_sqlite:
        cursor = await driver.driver_connection.execute(f"EXPLAIN QUERY PLAN {statement}", params)
        return "\n".join(str(row) for row in await cursor.fetchall())
    rows = await driver.driver_connection.fetch(f"EXPLAIN {statement}", *params)
    return "\n".join(row[0] for row in rows)


async def test_since_starts_at_the_first_event_since_by_index(
    db: Database, account_id: str
) -> None:
    """With a long history before `since`, the read starts at `since` in the account's
    creation-time index instead of walking every older event in feed order."""
    long_ago = clock.now() - timedelta(days=30)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(events),
            [
                {
                    "id": ids.new_id("evt"),
                    "account_id": account_id,
                    "type": "payment.created",
                    "data": "{}",
                    "created_at": long_ago + timedelta(seconds=n),
                }
                for n in range(3000)
            ],
        )
    recent = [await _emit(db, account_id, n) for n in range(3)]
    async with db.unit_of_work() as uow:
        await uow.conn.execute(text("ANALYZE"))
    since = clock.now() - timedelta(minutes=5)

    async def visible() -> bool:
        """On PostgreSQL a transaction open elsewhere on the server holds the horizon back."""
        async with db.read() as conn:
            page = await feed.read(conn, account_id, after=feed.START, limit=10, since=since)
        return [row.id for row in page.rows] == recent

    await until(visible, within=60, what="the recent events to pass the horizon")
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "webhook_events" in statement and "created_at >=" in statement:
            seen.append((statement, params))

    async with db.read() as conn:
        event.listen(conn.sync_connection, "before_cursor_execute", capture)
        page = await feed.read(conn, account_id, after=feed.START, limit=10, since=since)
        event.remove(conn.sync_connection, "before_cursor_execute", capture)
        assert [row.id for row in page.rows] == recent
        ((statement, params),) = seen
        plan = await _explained(db, conn, statement, params)
    assert "ix_webhook_events_account_id_created_at" in plan, plan
