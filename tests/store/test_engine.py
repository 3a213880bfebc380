import asyncio
import uuid

import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock
from ustun.service.resources.schema import payments
from ustun.store import Database, async_url
from ustun.store.tables import accounts
from ustun.store.uow import LastHook


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///./ustun.db", "sqlite+aiosqlite:///./ustun.db"),
        ("sqlite:////abs/x.db", "sqlite+aiosqlite:////abs/x.db"),
        ("postgresql://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgres://u:p@h:5433/db", "postgresql+asyncpg://u:p@h:5433/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_async_url_picks_the_async_driver(given: str, expected: str) -> None:
    assert async_url(given) == expected


def test_async_url_refuses_other_databases() -> None:
    with pytest.raises(ValueError, match="use sqlite:///path or postgresql://"):
        async_url("mysql://u@h/db")


async def _insert_account(db: Database, name: str) -> None:
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts).values(id=f"acct_{name}", name=name, created_at=clock.now())
        )


async def _exists(db: Database, name: str) -> bool:
    async with db.read() as conn:
        return (await conn.scalar(select(accounts.c.id).where(accounts.c.name == name))) is not None


async def test_unit_of_work_commits(db: Database) -> None:
    name = f"commit-{id(db)}"
    await _insert_account(db, name)
    assert await _exists(db, name)


async def test_unit_of_work_rolls_back_on_error_and_skips_after_commit(db: Database) -> None:
    name = f"rollback-{id(db)}"
    ran: list[str] = []

    async def after() -> None:
        ran.append("after")

    with pytest.raises(RuntimeError, match="boom"):
        async with db.unit_of_work() as uow:
            uow.after_commit(after)
            await uow.conn.execute(
                insert(accounts).values(id=f"acct_{name}", name=name, created_at=clock.now())
            )
            raise RuntimeError("boom")
    assert not await _exists(db, name)
    assert ran == []


async def test_hooks_run_in_order_around_commit(db: Database) -> None:
    name = f"hooks-{id(db)}"
    seen: list[tuple[str, bool]] = []

    async with db.unit_of_work() as uow:

        async def before() -> None:
            # Inside the transaction: the handler's write is visible on the same connection.
            found = await uow.conn.scalar(select(accounts.c.id).where(accounts.c.name == name))
            seen.append(("before", found is not None))

        async def after() -> None:
            seen.append(("after", await _exists(db, name)))

        uow.before_commit(before)
        uow.after_commit(after)
        await uow.conn.execute(
            insert(accounts).values(id=f"acct_{name}", name=name, created_at=clock.now())
        )
    assert seen == [("before", True), ("after", True)]


async def test_failing_before_commit_hook_rolls_everything_back(db: Database) -> None:
    name = f"hookfail-{id(db)}"

    async def fail() -> None:
        raise RuntimeError("lease lost")

    with pytest.raises(RuntimeError, match="lease lost"):
        async with db.unit_of_work() as uow:
            uow.before_commit(fail)
            await uow.conn.execute(
                insert(accounts).values(id=f"acct_{name}", name=name, created_at=clock.now())
            )
    assert not await _exists(db, name)


async def test_at_commit_hooks_run_last_and_know_when_they_are_alone(db: Database) -> None:
    seen: list[tuple[str, bool]] = []

    def last(name: str) -> LastHook:
        async def hook(alone: bool) -> None:
            seen.append((name, alone))

        return hook

    async def before() -> None:
        seen.append(("before", False))

    async with db.unit_of_work() as uow:
        uow.at_commit(last("only"))
        uow.before_commit(before)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(select(1))
        uow.at_commit(last("after a statement"))
    async with db.unit_of_work() as uow:
        uow.at_commit(last("first of two"))
        uow.at_commit(last("second of two"))
    # Alone only on PostgreSQL, whose transactions begin at their first statement.
    postgres = not db.is_sqlite
    assert seen == [
        ("before", False),
        ("only", postgres),
        ("after a statement", False),
        ("first of two", False),
        ("second of two", False),
    ]


async def test_nested_unit_of_work_joins_the_outer_one(db: Database) -> None:
    name = f"nested-{id(db)}"
    with pytest.raises(RuntimeError):
        async with db.unit_of_work() as outer:
            async with db.unit_of_work() as inner:
                assert inner is outer
                await inner.conn.execute(
                    insert(accounts).values(id=f"acct_{name}", name=name, created_at=clock.now())
                )
            raise RuntimeError("outer fails after the inner block finished")
    assert not await _exists(db, name)


async def test_concurrent_writers_never_lose_an_update(db: Database) -> None:
    """50 concurrent read-then-write transactions (row lock on PostgreSQL, BEGIN IMMEDIATE on
    SQLite) end with exactly 50 increments."""
    name = f"counter-{id(db)}"
    await _insert_account(db, name)
    now = clock.now()
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(payments).values(
                id=f"pay_{name}",
                account_id=f"acct_{name}",
                amount=0,
                currency="EUR",
                status="pending",
                version=1,
                created_at=now,
                updated_at=now,
            )
        )
    row = payments.c.id == f"pay_{name}"

    async def bump() -> None:
        async with db.unit_of_work() as uow:
            query = select(payments.c.amount).where(row)
            if db.dialect == "postgresql":
                query = query.with_for_update()
            amount = await uow.conn.scalar(query)
            await asyncio.sleep(0)
            await uow.conn.execute(payments.update().where(row).values(amount=amount + 1))

    await asyncio.gather(*(bump() for _ in range(50)))
    async with db.read() as conn:
        assert await conn.scalar(select(payments.c.amount).where(row)) == 50


async def test_sqlite_runs_in_wal_mode_with_foreign_keys(db: Database) -> None:
    if not db.is_sqlite:
        pytest.skip("SQLite pragmas")
    async with db.read() as conn:
        assert (await conn.scalar(text("PRAGMA journal_mode"))) == "wal"
        assert (await conn.scalar(text("PRAGMA foreign_keys"))) == 1
        assert (await conn.scalar(text("PRAGMA busy_timeout"))) == 30_000


async def _count_accounts(conn: AsyncConnection) -> int:
    return int(await conn.scalar(select(func.count()).select_from(accounts)) or 0)


async def test_read_runs_each_statement_alone_and_a_snapshot_read_sees_one_snapshot(
    db: Database,
) -> None:
    """Without BEGIN each statement sees what committed before it; `snapshot=True` does not."""
    async with db.read() as conn:
        before = await _count_accounts(conn)
        await _insert_account(db, f"alone-{uuid.uuid4().hex[:12]}")
        assert await _count_accounts(conn) == before + 1
    async with db.read(snapshot=True) as conn:
        before = await _count_accounts(conn)
        await _insert_account(db, f"snapshot-{uuid.uuid4().hex[:12]}")
        assert await _count_accounts(conn) == before


async def test_sqlite_rolls_back_a_connection_returned_in_a_transaction(db: Database) -> None:
    """The pool skips its rollback on return; a transaction left open is still rolled back."""
    if not db.is_sqlite:
        pytest.skip("the SQLite pool's reset on return")
    async with db.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        left_open = raw.driver_connection
        await left_open.execute("BEGIN")  # behind SQLAlchemy's back: it knows of no transaction
        assert left_open.in_transaction
    async with db.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        assert raw.driver_connection is left_open
        assert not left_open.in_transaction


async def test_a_connection_back_from_a_read_writes_in_a_transaction_again(
    database_url: str,
) -> None:
    """The read's autocommit mode ends with the read: a unit of work on the same connection
    still rolls back as a whole."""
    db = Database(database_url, pool_size=1)
    name = f"after-read-{uuid.uuid4().hex[:12]}"
    try:
        async with db.read() as conn:
            await _count_accounts(conn)
        with pytest.raises(RuntimeError, match="boom"):
            async with db.unit_of_work() as uow:
                await uow.conn.execute(
                    insert(accounts).values(id=f"acct_{name}", name=name, created_at=clock.now())
                )
                raise RuntimeError("boom")
        assert not await _exists(db, name)
    finally:
        await db.dispose()
