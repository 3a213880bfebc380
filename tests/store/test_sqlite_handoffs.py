"""SQLite: a unit of work's hand-offs to aiosqlite's thread, counted on a real database file.

Each hand-off (a call queued for the connection's thread, `aiosqlite.core.Connection._execute`)
costs a thread wake-up and a trip back to the event loop: the BEGIN goes with the transaction's
first statement, the COMMIT with its last write where nothing follows it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiosqlite.core
import pytest
from sqlalchemy import bindparam, func, insert, select

from ustun import clock
from ustun.store import Database
from ustun.store.statements import Statement
from ustun.store.tables import accounts
from ustun.store.uow import sqlite_call

_ADD = Statement(
    insert(accounts).values(
        id=bindparam("id"),
        name=bindparam("name"),
        created_at=bindparam("created_at", type_=accounts.c.created_at.type),
    )
)
# The accounts whose names start with `name`: a test's accounts are named `<its name>-<uuid>`.
_NAMED = Statement(
    select(func.count().label("n")).where(accounts.c.name.startswith(bindparam("name")))
)


def _account(name: str) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex[:20],
        "name": f"{name}-{uuid.uuid4().hex}",
        "created_at": clock.now(),
    }


@pytest.fixture
async def lite(sqlite_url: str) -> AsyncIterator[Database]:
    """A `Database` on the session's SQLite file, its write connection already opened."""
    database = Database(sqlite_url)
    async with database.unit_of_work() as uow:
        await _NAMED.rows(uow.conn, {"name": "warm-up"}, begin=False)
    yield database
    await database.dispose()


@pytest.fixture
def handoffs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions handed to aiosqlite's threads, in order."""
    seen: list[str] = []
    real = aiosqlite.core.Connection._execute

    async def counted(self: aiosqlite.core.Connection, fn: Any, *args: Any, **kw: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return await real(self, fn, *args, **kw)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(aiosqlite.core.Connection, "_execute", counted)
    return seen


async def _named(db: Database, name: str) -> int:
    [row] = await _NAMED.read(db, {"name": name})
    return int(row.n)


async def _in_transaction(db: Database) -> bool:
    """Whether the write connection the pool lends next has a transaction open."""
    async with db.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        return bool(driver.in_transaction)


async def test_begin_goes_with_the_first_statement_and_commit_is_one_handoff(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    async with lite.unit_of_work() as uow:

        async def hook() -> None:
            assert await _ADD.count(uow.conn, _account(name)) == 1

        assert await _ADD.count(uow.conn, _account(name)) == 1
        assert uow.conn.in_transaction()  # SQLAlchemy's view follows the driver's
        uow.before_commit(hook)
    # Was: BEGIN IMMEDIATE, insert, the hook's insert, COMMIT (through SQLAlchemy).
    assert handoffs == ["_begun_then", "_begun_then", "_commit_raw"]
    assert await _named(lite, name) == 2
    assert not await _in_transaction(lite)


async def test_a_read_only_unit_of_work_that_executed_nothing_hands_nothing_off(
    lite: Database, handoffs: list[str]
) -> None:
    async with lite.unit_of_work():
        pass
    assert handoffs == []


async def test_sqlalchemy_statements_join_a_transaction_the_driver_began(lite: Database) -> None:
    name = uuid.uuid4().hex
    async with lite.unit_of_work() as uow:
        await _ADD.count(uow.conn, _account(name))
        await uow.conn.execute(insert(accounts).values(**_account(name)))
        found = await uow.conn.execute(select(func.count()).where(accounts.c.name.startswith(name)))
        assert found.scalar() == 2
    assert await _named(lite, name) == 2
    dropped = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="after both"):
        async with lite.unit_of_work() as uow:
            await _ADD.count(uow.conn, _account(dropped))
            await uow.conn.execute(insert(accounts).values(**_account(dropped)))
            raise RuntimeError("after both")
    assert await _named(lite, dropped) == 0
    assert not await _in_transaction(lite)


async def test_a_rollback_after_driver_writes_leaves_nothing_written(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="after the writes"):
        async with lite.unit_of_work() as uow:
            await _ADD.count(uow.conn, _account(name))
            await _ADD.many(uow.conn, [_account(name), _account(name)])
            raise RuntimeError("after the writes")
    assert handoffs[-1] == "_rollback_raw"
    assert await _named(lite, name) == 0
    assert not await _in_transaction(lite)


def _wait_for(raw: Any, gate: threading.Event, entered: threading.Event) -> None:
    entered.set()
    assert gate.wait(10), "the test never opened the gate"


async def test_a_first_statement_cancelled_while_queued_is_rolled_back(lite: Database) -> None:
    """The BEGIN and the write still run on the thread after their caller was cancelled: the
    unit of work rolls back behind them, and the pool never lends the connection in a
    transaction."""
    name = uuid.uuid4().hex
    gate, entered = threading.Event(), threading.Event()
    timed_out = asyncio.Event()
    blocker: asyncio.Future[None] | None = None

    async def write() -> None:
        nonlocal blocker
        async with lite.unit_of_work() as uow:
            blocker = asyncio.ensure_future(
                sqlite_call(uow.conn, _wait_for, gate, entered, begin=False)
            )
            assert await asyncio.to_thread(entered.wait, 10), "the thread never ran the blocker"
            try:
                # Queued behind the blocker at once; cancelled by the timeout while queued.
                await asyncio.wait_for(_ADD.count(uow.conn, _account(name)), 0.01)
            except TimeoutError:
                timed_out.set()
                raise

    task = asyncio.create_task(write())
    await asyncio.wait_for(timed_out.wait(), 10)
    gate.set()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(task, 10)
    assert blocker is not None
    await asyncio.wait_for(blocker, 10)
    assert not await _in_transaction(lite)
    assert await _named(lite, name) == 0
