"""A plan written once runs the same on the async engine and on a synchronous DB-API connection
(sqlite3, psycopg 3), on SQLite and PostgreSQL, and leaves the same rows."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from sqlalchemy import bindparam, literal, select, update
from sqlalchemy.engine import make_url

from support import sync_connection
from ustun import ids
from ustun.store import Database
from ustun.store.dbapi import DbapiConnection
from ustun.store.plans import Plan, count, rows, run, run_sync
from ustun.store.statements import Statement
from ustun.store.tables import accounts

CREATED = datetime(2026, 12, 5, 10, 30, 15, 250_000, tzinfo=UTC)
_INSERT = Statement(accounts.insert())
# A literal `%` in the SQL: the `format` parameter style must escape it.
_MARK = Statement(
    update(accounts)
    .where(accounts.c.id == bindparam("id"))
    .values(name=accounts.c.name + literal("%"))
)
_READ = Statement(
    select(accounts.c.id, accounts.c.name, accounts.c.created_at).where(
        accounts.c.id == bindparam("id")
    )
)


def _open_and_mark(name: str) -> Plan[tuple[int, list[tuple[object, ...]]]]:
    """Insert an account, change its name, read it back: how many changed, and the row."""
    account = ids.new_id("acct")
    yield count(_INSERT, {"id": account, "name": name, "created_at": CREATED})
    changed = yield count(_MARK, {"id": account})
    found = yield rows(_READ, {"id": account})
    return changed, [(row.name, row.created_at) for row in found]


async def test_a_plan_leaves_the_same_rows_on_either_kind_of_connection(
    db: Database, database_url: str
) -> None:
    async with db.unit_of_work() as uow:
        on_async = await run(_open_and_mark(ids.new_id("plan")), uow.conn)
    with sync_connection(database_url) as conn:
        on_sync = run_sync(_open_and_mark(ids.new_id("plan")), conn)
    assert on_async[0] == on_sync[0] == 1
    ((async_name, async_created),) = on_async[1]
    ((sync_name, sync_created),) = on_sync[1]
    assert async_name.endswith("%")
    assert sync_name.endswith("%")
    assert async_created == sync_created == CREATED


async def test_what_a_sync_plan_wrote_is_read_through_the_async_engine(
    db: Database, database_url: str
) -> None:
    name = ids.new_id("plan")
    with sync_connection(database_url) as conn:
        run_sync(_open_and_mark(name), conn)
    async with db.read() as conn_:
        found = (
            await conn_.execute(
                select(accounts.c.name, accounts.c.created_at).where(accounts.c.name == f"{name}%")
            )
        ).one()
    assert tuple(found) == (f"{name}%", CREATED)


def test_a_plan_runs_in_the_transaction_the_connection_has_open(sqlite_url: str) -> None:
    """Nothing commits behind the caller's back: rolled back, the plan's rows are gone."""
    lite = sqlite3.connect(str(make_url(sqlite_url).database))
    try:
        name = ids.new_id("plan")
        run_sync(_open_and_mark(name), DbapiConnection(lite, "sqlite"))
        lite.rollback()
        left = lite.execute("SELECT count(*) FROM accounts WHERE name = ?", (f"{name}%",))
        assert left.fetchone() == (0,)
    finally:
        lite.close()
