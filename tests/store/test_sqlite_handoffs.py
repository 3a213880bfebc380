"""SQLite: a unit of work's hand-offs to aiosqlite's thread, counted on a real database file.

Each hand-off (a call queued for the connection's thread, `aiosqlite.core.Connection._execute`)
costs a thread wake-up and a trip back to the event loop: the BEGIN goes with the transaction's
first statement, the COMMIT with its last write where nothing follows it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiosqlite.core
import pytest
from sqlalchemy import bindparam, func, insert, select, update

from ustun import clock
from ustun.store import Database
from ustun.store.plans import Plan, count, rows
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
    """The names of the functions handed to aiosqlite's threads, in order (the work's, for a
    hand-off that begins the transaction and runs the unit of work's waiting writes first)."""
    seen: list[str] = []
    real = aiosqlite.core.Connection._execute

    async def counted(self: aiosqlite.core.Connection, fn: Any, *args: Any, **kw: Any) -> Any:
        work = args[3] if getattr(fn, "__name__", "") == "_begun_then" else fn
        seen.append(getattr(work, "__name__", repr(work)))
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
    assert handoffs == ["_rowcount", "_rowcount", "_commit_raw"]
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


_RENAME = Statement(
    update(accounts).where(accounts.c.id == bindparam("id")).values(name=bindparam("name"))
)


def _add_then_count(name: str) -> Plan[int]:
    """Add an account named `name-…`, then count those: a plan of a write and a read."""
    yield count(_ADD, _account(name))
    [row] = yield rows(_NAMED, {"name": name})
    return int(row.n)


def _rename(account_id: str, name: str) -> Plan[int]:
    """Rename an account: 1 row changed, or 0 if there is no such account."""
    changed: int = yield count(_RENAME, {"id": account_id, "name": f"{name}-{uuid.uuid4().hex}"})
    return changed


def _one(changed: int) -> bool:
    return changed == 1


def _appending(seen: list[Any], value: Any) -> Callable[[], Awaitable[None]]:
    """An after-commit hook that appends `value` to `seen`."""

    async def append() -> None:
        seen.append(value)

    return append


async def test_the_last_hooks_plan_and_commit_go_in_one_handoff(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    committed: list[int] = []
    async with lite.unit_of_work() as uow:

        async def hook() -> None:
            committed.append(await uow.run_last(_add_then_count(name), commit_if=bool))

        await _ADD.count(uow.conn, _account(name))
        uow.before_commit(hook)
        uow.after_commit(_appending(committed, -1))
    # Was: BEGIN IMMEDIATE, insert, the hook's insert, its read, COMMIT.
    assert handoffs == ["_rowcount", "_run_then_end"]
    assert committed == [2, -1]  # the plan saw both writes; after_commit ran after the commit
    assert await _named(lite, name) == 2
    assert not await _in_transaction(lite)


async def test_a_failing_row_count_check_rolls_everything_back(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    after: list[str] = []
    with pytest.raises(LookupError, match="no such account"):
        async with lite.unit_of_work() as uow:

            async def hook() -> None:
                if not await uow.run_last(_rename("no-such-id", name), commit_if=_one):
                    raise LookupError("no such account")

            await _ADD.count(uow.conn, _account(name))
            await uow.conn.execute(insert(accounts).values(**_account(name)))
            uow.before_commit(hook)
            uow.after_commit(_appending(after, "ran"))
    assert handoffs[-1] == "_run_then_end"  # the ROLLBACK went with the check
    assert after == []
    assert await _named(lite, name) == 0
    assert not await _in_transaction(lite)


async def test_a_rollback_by_run_last_fails_the_unit_of_work_even_if_its_caller_goes_on(
    lite: Database,
) -> None:
    name = uuid.uuid4().hex
    after: list[str] = []
    with pytest.raises(RuntimeError, match="rolled the unit of work back"):
        async with lite.unit_of_work() as uow:

            async def hook() -> None:
                await uow.run_last(_rename("no-such-id", name), commit_if=_one)

            await _ADD.count(uow.conn, _account(name))
            uow.before_commit(hook)
            uow.after_commit(_appending(after, "ran"))
    assert after == []
    assert await _named(lite, name) == 0


async def test_a_statement_after_run_last_is_rolled_back_and_fails_the_unit_of_work(
    lite: Database,
) -> None:
    name, late = uuid.uuid4().hex, uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="after its run_last"):
        async with lite.unit_of_work() as uow:

            async def hook() -> None:
                await uow.run_last(_add_then_count(name), commit_if=bool)
                await _ADD.count(uow.conn, _account(late))  # breaks run_last's contract

            uow.before_commit(hook)
    assert await _named(lite, late) == 0
    assert not await _in_transaction(lite)


async def test_run_last_before_other_hooks_stays_in_the_transaction(
    lite: Database, handoffs: list[str]
) -> None:
    """Not the last hook: the plan runs as any other, and a later failure rolls it back."""
    name = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="the second hook"):
        async with lite.unit_of_work() as uow:

            async def first() -> None:
                assert await uow.run_last(_add_then_count(name), commit_if=bool) == 1

            async def second() -> None:
                raise RuntimeError("the second hook")

            uow.before_commit(first)
            uow.before_commit(second)
    assert "_run_then_end" not in handoffs
    assert await _named(lite, name) == 0
    assert not await _in_transaction(lite)


async def test_a_plan_that_fails_in_run_last_rolls_everything_back(lite: Database) -> None:
    name = uuid.uuid4().hex
    taken = _account(name)

    def duplicate() -> Plan[int]:
        changed: int = yield count(_ADD, taken)  # the same id again: a unique violation
        return changed

    with pytest.raises(sqlite3.IntegrityError):
        async with lite.unit_of_work() as uow:

            async def hook() -> None:
                await uow.run_last(duplicate(), commit_if=_one)

            await _ADD.count(uow.conn, taken)
            uow.before_commit(hook)
    assert await _named(lite, name) == 0
    assert not await _in_transaction(lite)


async def test_run_last_on_a_transaction_sqlalchemy_began(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    async with lite.unit_of_work() as uow:

        async def hook() -> None:
            assert await uow.run_last(_add_then_count(name), commit_if=bool) == 2

        await uow.conn.execute(insert(accounts).values(**_account(name)))
        uow.before_commit(hook)
    assert handoffs[-1] == "_run_then_end"
    assert await _named(lite, name) == 2
    assert not await _in_transaction(lite)


async def test_fifty_concurrent_units_of_work_each_commit_exactly_once(lite: Database) -> None:
    name = uuid.uuid4().hex
    results: list[int] = []

    async def one(i: int) -> None:
        async with lite.unit_of_work() as uow:

            async def hook() -> None:
                results.append(await uow.run_last(_add_then_count(f"{name}-{i}"), commit_if=bool))

            await _ADD.count(uow.conn, _account(f"{name}-{i}"))
            uow.before_commit(hook)

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(50))), 60)
    assert results == [2] * 50
    assert await _named(lite, name) == 100
    for i in range(50):
        assert await _named(lite, f"{name}-{i}-") == 2
    assert not await _in_transaction(lite)


_ADD_RETURNING = Statement(
    insert(accounts)
    .values(
        id=bindparam("id"),
        name=bindparam("name"),
        created_at=bindparam("created_at", type_=accounts.c.created_at.type),
    )
    .returning(accounts.c.id)
)


async def test_a_statement_alone_is_one_handoff(lite: Database, handoffs: list[str]) -> None:
    name = uuid.uuid4().hex
    account = _account(name)
    [row] = await _ADD_RETURNING.alone(lite, account)
    assert row.id == account["id"]
    # Was: BEGIN IMMEDIATE, the statement, COMMIT.
    assert handoffs == ["_run_then_end"]
    assert await _named(lite, name) == 1
    with pytest.raises(sqlite3.IntegrityError):
        await _ADD_RETURNING.alone(lite, account)  # the same id again
    assert not await _in_transaction(lite)
    assert await _named(lite, name) == 1
    async with lite.unit_of_work() as uow:  # inside a unit of work, it joins it
        await _ADD_RETURNING.alone(lite, _account(name))
        assert uow.conn.in_transaction()
    assert await _named(lite, name) == 2


async def test_run_last_commits_or_rolls_back_alike_on_both_databases(db: Database) -> None:
    """On PostgreSQL `run_last` runs the plan in the transaction, which commits as usual."""
    kept, dropped = uuid.uuid4().hex, uuid.uuid4().hex
    async with db.unit_of_work() as uow:

        async def keep() -> None:
            assert await uow.run_last(_add_then_count(kept), commit_if=bool) == 2

        await _ADD.count(uow.conn, _account(kept))
        uow.before_commit(keep)
    with pytest.raises(LookupError):
        async with db.unit_of_work() as uow:

            async def drop() -> None:
                if not await uow.run_last(_rename("no-such-id", dropped), commit_if=_one):
                    raise LookupError("no such account")

            await _ADD.count(uow.conn, _account(dropped))
            uow.before_commit(drop)
    assert await _named(db, kept) == 2
    assert await _named(db, dropped) == 0


def _added(name: str) -> Plan[int]:
    """A write nothing reads before the commit: one account named `<name>-…`."""
    changed = yield count(_ADD, _account(name))
    return int(changed)


async def test_a_waiting_write_goes_with_the_next_statement(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    results: list[int] = []
    async with lite.unit_of_work() as uow:
        await uow.later(_added(name), results.append)
        assert handoffs == []
        assert results == []
        assert await _ADD.count(uow.conn, _account(name)) == 1
        assert results == [1]  # ran first, in the same hand-off
    assert handoffs == ["_rowcount", "_commit_raw"]
    assert await _named(lite, name) == 2


async def test_a_waiting_write_alone_goes_with_the_commit(
    lite: Database, handoffs: list[str]
) -> None:
    name = uuid.uuid4().hex
    results: list[int] = []
    async with lite.unit_of_work() as uow:
        await uow.later(_added(name), results.append)
        await uow.later(_added(name), results.append)
    # BEGIN IMMEDIATE, both writes and COMMIT: one hand-off.
    assert handoffs == ["_commit_raw"]
    assert results == [1, 1]
    assert await _named(lite, name) == 2
    assert not await _in_transaction(lite)


async def test_sqlalchemys_own_statement_sees_a_waiting_write(lite: Database) -> None:
    name = uuid.uuid4().hex
    async with lite.unit_of_work() as uow:
        await uow.later(_added(name), lambda _: None)
        found = await uow.conn.scalar(select(func.count()).where(accounts.c.name.startswith(name)))
        assert found == 1
    assert await _named(lite, name) == 1


async def test_a_rollback_drops_a_waiting_write_unrun(lite: Database, handoffs: list[str]) -> None:
    name = uuid.uuid4().hex
    results: list[int] = []
    with pytest.raises(RuntimeError, match="handler failed"):
        async with lite.unit_of_work() as uow:
            await uow.later(_added(name), results.append)
            raise RuntimeError("handler failed")
    assert results == []
    assert handoffs == []
    assert await _named(lite, name) == 0
    with pytest.raises(sqlite3.IntegrityError):
        async with lite.unit_of_work() as uow:
            account = _account(name)
            await _ADD.count(uow.conn, account)
            await uow.later(_added(name), results.append)
            await _ADD.count(uow.conn, account)  # the same id again: the unit of work fails
    assert await _named(lite, name) == 0  # the waiting write ran, and was rolled back
    assert not await _in_transaction(lite)


async def test_a_waiting_write_runs_at_once_on_postgresql(db: Database) -> None:
    """`later` saves a hand-off on SQLite; elsewhere the plan runs when it is called."""
    name = uuid.uuid4().hex
    results: list[int] = []
    async with db.unit_of_work() as uow:
        await uow.later(_added(name), results.append)
        if db.dialect == "postgresql":
            assert results == [1]
    assert results == [1]
    assert await _named(db, name) == 1


async def test_a_waiting_write_that_fails_at_the_commit_rolls_everything_back(
    lite: Database,
) -> None:
    name = uuid.uuid4().hex
    account = _account(name)
    results: list[int] = []

    def again() -> Plan[int]:
        changed = yield count(_ADD, account)  # the same id as the handler's insert
        return int(changed)

    with pytest.raises(sqlite3.IntegrityError):
        async with lite.unit_of_work() as uow:
            await _ADD.count(uow.conn, account)
            await uow.later(again(), results.append)
    assert results == []
    assert await _named(lite, name) == 0
    assert not await _in_transaction(lite)
