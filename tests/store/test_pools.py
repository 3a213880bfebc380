"""The database's pools: reads and writes apart, write connections shared fairly between
tenants, a connection the server closed never lent, timeouts, and what an outage is."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import DBAPIError

from support import PG_SERVER
from ustun import clock
from ustun.store import Database
from ustun.store.engine import FairShares, on_behalf_of
from ustun.store.migrate import _PG_MIGRATION_LOCK, upgrade
from ustun.store.reach import outage
from ustun.store.tables import accounts
from ustun.store.uow import asyncpg_connection
from webhook_support import until


async def _new_account(db: Database) -> str:
    account_id = f"acct_{uuid.uuid4().hex[:12]}"
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts).values(id=account_id, name=account_id, created_at=clock.now())
        )
    return account_id


# --- fair shares of the write slots -------------------------------------------------------


async def test_one_tenant_never_takes_every_slot() -> None:
    shares = FairShares(4)
    for _ in range(3):
        await shares.acquire("b")
    fourth = asyncio.create_task(shares.acquire("b"))
    await asyncio.sleep(0)
    assert not fourth.done(), "b may hold three of four slots"
    await asyncio.wait_for(shares.acquire("a"), 1)  # the slot kept for the others
    shares.release("b")
    await asyncio.wait_for(fourth, 1)


async def test_a_freed_slot_goes_to_the_tenant_served_least_recently() -> None:
    shares = FairShares(1)
    order: list[str] = []

    async def write(tenant: str, n: int) -> None:
        await shares.acquire(tenant)
        order.append(f"{tenant}{n}")
        await asyncio.sleep(0)
        shares.release(tenant)

    await shares.acquire("b")  # b holds the one slot; b queues three more, then a one
    queued = [asyncio.create_task(write("b", n)) for n in (1, 2, 3)]
    await asyncio.sleep(0)
    queued.append(asyncio.create_task(write("a", 1)))
    await asyncio.sleep(0)
    shares.release("b")
    await asyncio.gather(*queued)
    assert order == ["a1", "b1", "b2", "b3"]


async def test_a_waiter_cancelled_as_it_is_granted_passes_the_slot_on() -> None:
    shares = FairShares(1)
    await shares.acquire("b")
    cancelled = asyncio.create_task(shares.acquire("a"))
    following = asyncio.create_task(shares.acquire("c"))
    await asyncio.sleep(0)
    shares.release("b")  # grants a's waiter…
    cancelled.cancel()  # …which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await asyncio.wait_for(following, 1)


async def _lock_waiters(url: str) -> int:
    """How many backends of the database at `url` wait for a lock."""
    conn = await asyncpg.connect(url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    finally:
        await conn.close()


async def test_another_tenants_write_starts_while_one_tenants_writes_wait_on_a_row(
    own_database_url: str,
) -> None:
    """Writes of tenant b queued on one row's lock (PostgreSQL) or on SQLite's one writer
    leave tenant a's write its turn: it does not wait behind them."""
    db = Database(own_database_url, pool_size=4)
    release = asyncio.Event()
    try:
        row = await _new_account(db)
        holding = asyncio.Event()

        async def b_writes(first: bool) -> None:
            with on_behalf_of("b"):
                async with db.unit_of_work() as uow:
                    await uow.conn.execute(
                        update(accounts).where(accounts.c.id == row).values(name=row)
                    )
                    if first:
                        holding.set()
                        await release.wait()

        first = asyncio.create_task(b_writes(True))
        await holding.wait()
        queued = [asyncio.create_task(b_writes(False)) for _ in range(20)]
        with on_behalf_of("a"):
            if db.is_sqlite:
                await asyncio.sleep(0)  # each of b's writes now waits for the writer
                a_write = asyncio.create_task(_new_account(db))
                await asyncio.sleep(0)
                release.set()
                await asyncio.wait_for(a_write, 10)
                assert sum(task.done() for task in queued) <= 1, "a's write came after b's"
            else:
                # b holds three of the four write connections: one its lock, two waiting on it

                async def b_waits() -> bool:
                    return await _lock_waiters(own_database_url) >= 2

                await until(b_waits, what="b's writes to wait on the row")
                await asyncio.wait_for(_new_account(db), 5)
                release.set()
        await asyncio.gather(first, *queued)
    finally:
        release.set()
        await db.dispose()


# --- reads and writes on pools of their own -------------------------------------------------


async def test_reads_that_hold_every_read_connection_leave_writes_theirs(
    own_database_url: str,
) -> None:
    db = Database(own_database_url, pool_size=4)
    try:
        release = asyncio.Event()
        reading = 0

        async def slow_read() -> None:
            nonlocal reading
            async with db.read() as conn:
                await conn.execute(select(accounts.c.id).limit(1))
                reading += 1
                await release.wait()

        reads = [asyncio.create_task(slow_read()) for _ in range(40)]

        async def reads_hold_connections() -> bool:
            return reading >= 2

        await until(reads_hold_connections, what="reads to hold the read connections")
        await asyncio.wait_for(_new_account(db), 5)
        release.set()
        await asyncio.gather(*reads)
    finally:
        release.set()
        await db.dispose()


# --- a connection the server closed ----------------------------------------------------------


def _watch(conn: asyncpg.Connection) -> asyncio.Event:
    """An event set once asyncpg sees the connection closed."""
    closed = asyncio.Event()
    conn.add_termination_listener(lambda _conn: closed.set())
    return closed


async def _terminate_backends(url: str) -> None:
    """What a restart does to every connection: the server closes them (pg_terminate_backend)."""
    name = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(PG_SERVER)
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
        )
    finally:
        await admin.close()


async def test_no_pool_lends_a_connection_the_server_closed(own_postgresql_url: str) -> None:
    db = Database(own_postgresql_url, pool_size=1)
    try:
        closed = []
        async with db.unit_of_work() as uow:
            await uow.conn.execute(text("SELECT 1"))
            closed.append(_watch((await uow.conn.get_raw_connection()).driver_connection))
        async with db.read() as conn:
            await conn.execute(text("SELECT 1"))
            closed.append(_watch((await conn.get_raw_connection()).driver_connection))
        async with db.autocommit() as driver:
            closed.append(_watch(driver))
        async with db.driver_reader() as driver:
            closed.append(_watch(driver))

        await _terminate_backends(own_postgresql_url)
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in closed)), 10)

        async with db.unit_of_work() as uow:
            assert await uow.conn.scalar(text("SELECT 1")) == 1
        async with db.read() as conn:
            assert await conn.scalar(text("SELECT 1")) == 1
        async with db.autocommit() as driver:
            assert await driver.fetchval("SELECT 1") == 1
        async with db.driver_reader() as driver:
            assert await driver.fetchval("SELECT 1") == 1
    finally:
        await db.dispose()


async def test_a_unit_of_work_whose_connection_died_raises_what_killed_it(
    own_postgresql_url: str,
) -> None:
    """A hot statement on the driver loses its connection: the unit of work's rollback fails
    too, and the error raised is the first one (an outage), not the rollback's."""
    db = Database(own_postgresql_url, pool_size=1)
    try:
        with pytest.raises(asyncpg.InterfaceError) as raised:
            async with db.unit_of_work() as uow:
                driver = await asyncpg_connection(uow.conn)
                closed = _watch(driver)
                await _terminate_backends(own_postgresql_url)
                await asyncio.wait_for(closed.wait(), 10)
                await driver.fetch("SELECT 1")
        assert outage(raised.value) is not None
        async with db.unit_of_work() as uow:
            assert await uow.conn.scalar(text("SELECT 1")) == 1
    finally:
        await db.dispose()


# --- timeouts and outages ----------------------------------------------------------------------


async def test_a_statement_past_the_statement_timeout_is_a_busy_outage(
    own_postgresql_url: str,
) -> None:
    db = Database(own_postgresql_url, statement_timeout=0.05)
    try:
        with pytest.raises(DBAPIError) as raised:
            async with db.read() as conn:
                await conn.execute(text("SELECT pg_sleep(2)"))
        found = outage(raised.value)
        assert found is not None
        assert found.kind == "busy"
        with pytest.raises(asyncpg.QueryCanceledError) as cancelled:
            async with db.driver_reader() as driver:
                await driver.fetch("SELECT pg_sleep(2)")
        assert (found := outage(cancelled.value)) is not None
        assert found.kind == "busy"
        async with db.driver_reader() as driver:  # a timeout leaves the connection usable
            assert await driver.fetchval("SELECT 1") == 1
    finally:
        await db.dispose()


async def test_a_lock_waited_on_past_the_lock_timeout_is_a_busy_outage(
    own_postgresql_url: str,
) -> None:
    db = Database(own_postgresql_url, lock_timeout=0.1)
    release = asyncio.Event()
    try:
        row = await _new_account(db)
        change = update(accounts).where(accounts.c.id == row).values(name=row)
        locked = asyncio.Event()

        async def hold_the_row() -> None:
            async with db.unit_of_work() as uow:
                await uow.conn.execute(change)
                locked.set()
                await release.wait()

        holder = asyncio.create_task(hold_the_row())
        await locked.wait()
        with pytest.raises(DBAPIError) as raised:
            async with asyncio.timeout(10), db.unit_of_work() as uow:
                await uow.conn.execute(change)
        release.set()
        await holder
        found = outage(raised.value)
        assert found is not None
        assert found.kind == "busy"
        assert "USTUN_LOCK_TIMEOUT" in found.detail
    finally:
        release.set()
        await db.dispose()


async def test_migrations_run_without_the_timeouts(own_postgresql_url: str) -> None:
    """A migration waits for another process's migration however long it takes."""
    db = Database(own_postgresql_url, lock_timeout=0.05)
    other = await asyncpg.connect(own_postgresql_url)
    try:
        await other.execute("SELECT pg_advisory_lock($1)", _PG_MIGRATION_LOCK)
        migrating = asyncio.create_task(upgrade(db))

        async def waiting() -> bool:
            return await _lock_waiters(own_postgresql_url) >= 1

        await until(waiting, what="the migration to wait for the other's")
        await asyncio.sleep(0.3)  # six lock timeouts
        assert not migrating.done(), migrating.exception()
        await other.execute("SELECT pg_advisory_unlock($1)", _PG_MIGRATION_LOCK)
        await asyncio.wait_for(migrating, 10)
    finally:
        await other.close()
        await db.dispose()
