"""The autocommit connections of PostgreSQL hot paths: reuse, the cap, and what is never reused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from ustun.store import Database
from ustun.store.autocommit import AutocommitPool


@pytest.fixture
async def pool(pg: Database) -> AsyncIterator[AutocommitPool]:
    lending = AutocommitPool(pg.dsn, 2)
    yield lending
    await lending.close()


async def _backend(pool: AutocommitPool) -> int:
    async with pool.connection() as conn:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def test_a_connection_is_reused_and_each_statement_commits_by_itself(
    pool: AutocommitPool,
) -> None:
    async with pool.connection() as conn:
        await conn.execute("CREATE TEMP TABLE t (v int)")
        await conn.execute("INSERT INTO t VALUES (1)")
        assert not conn.is_in_transaction()
    first = await _backend(pool)
    assert await _backend(pool) == first


async def test_json_is_read_parsed_and_written_as_serialised_text(pool: AutocommitPool) -> None:
    async with pool.connection() as conn:
        assert await conn.fetchval("SELECT $1::json", '{"a": [1]}') == {"a": [1]}
        assert await conn.fetchval("SELECT '{\"b\": 2}'::jsonb") == {"b": 2}


async def test_a_server_error_keeps_the_connection(pool: AutocommitPool) -> None:
    first = await _backend(pool)
    with pytest.raises(asyncpg.UndefinedTableError):
        async with pool.connection() as conn:
            await conn.execute("SELECT * FROM no_such_table")
    assert await _backend(pool) == first


async def test_a_statement_cancelled_midway_closes_its_connection(pool: AutocommitPool) -> None:
    first = await _backend(pool)
    started = asyncio.Event()

    async def sleeper() -> None:
        async with pool.connection() as conn:
            started.set()
            await conn.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(sleeper())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.05)  # let the statement reach the server; the check holds either way
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert await asyncio.wait_for(_backend(pool), 10) != first


async def test_at_most_size_connections_are_lent_at_once(pool: AutocommitPool) -> None:
    lent, most, release = 0, 0, asyncio.Event()

    async def borrower() -> None:
        nonlocal lent, most
        async with pool.connection():
            lent += 1
            most = max(most, lent)
            await release.wait()
            lent -= 1

    tasks = [asyncio.create_task(borrower()) for _ in range(5)]
    deadline = asyncio.get_running_loop().time() + 10
    while lent < 2:
        assert asyncio.get_running_loop().time() < deadline, "two borrowers never got a connection"
        await asyncio.sleep(0.01)
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert most == 2


async def test_close_closes_idle_connections_and_lent_ones_when_given_back(
    pool: AutocommitPool,
) -> None:
    async with pool.connection() as first, pool.connection() as second:
        pass
    async with pool.connection() as lent:
        (idle,) = {first, second} - {lent}
        await pool.close()
        assert idle.is_closed()
        assert not lent.is_closed()
    assert lent.is_closed()
    assert await _backend(pool) > 0  # a closed pool connects anew, as after SQLAlchemy's dispose


async def test_the_database_lends_autocommit_connections_on_postgresql_only(pg: Database) -> None:
    async with pg.autocommit() as conn:
        assert await conn.fetchval("SELECT 1") == 1
    sqlite = Database("sqlite:///:memory:")
    try:
        with pytest.raises(RuntimeError, match="unit_of_work"):
            async with sqlite.autocommit():
                pass
    finally:
        await sqlite.dispose()


async def test_sqlite_readers_see_each_commit_and_are_reused(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path}/readers.db")
    try:
        async with db.unit_of_work() as uow:
            await uow.conn.exec_driver_sql("CREATE TABLE t (v INTEGER)")
        seen = []
        for value in (1, 2):
            async with db.unit_of_work() as uow:
                await uow.conn.exec_driver_sql(f"INSERT INTO t VALUES ({value})")
            async with db.driver_reader() as reader:
                seen.append(reader)
                assert not reader.in_transaction
                assert await reader.execute_fetchall("SELECT sum(v) FROM t") == [
                    (sum(range(1, value + 1)),)
                ]
        assert seen[0] is seen[1]
        await db.dispose()
        async with db.driver_reader() as fresh:
            assert fresh is not seen[0]
            assert await fresh.execute_fetchall("SELECT count(*) FROM t") == [(2,)]
    finally:
        await db.dispose()


async def test_an_in_memory_sqlite_database_has_no_driver_reader() -> None:
    db = Database("sqlite:///:memory:")
    try:
        async with db.driver_reader() as reader:
            assert reader is None
    finally:
        await db.dispose()
