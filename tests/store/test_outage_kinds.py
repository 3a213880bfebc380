"""What a database error says about the database (`outage`): down or unreachable, too slow,
or out of disk space; any other error is none."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import psycopg
import pytest
from sqlalchemy import insert, text
from sqlalchemy.exc import DBAPIError

from support import PG_SERVER, free_port
from ustun import clock
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.store.reach import outage
from ustun.store.tables import accounts


async def test_an_unreachable_server_is_an_unavailable_outage() -> None:
    db = Database(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    try:
        with pytest.raises(ConnectionRefusedError) as raised:
            async with db.read() as conn:
                await conn.execute(text("SELECT 1"))
        assert (found := outage(raised.value)) is not None
        assert found.kind == "unavailable"
    finally:
        await db.dispose()


async def test_a_full_sqlite_database_is_a_full_outage(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'small.db'}")
    try:
        await upgrade(db)
        async with db.read() as conn:
            pages = await conn.scalar(text("PRAGMA page_count"))
        with pytest.raises(DBAPIError) as raised:
            async with db.unit_of_work() as uow:
                # The file may not grow past its size now, as on a full disk.
                await uow.conn.execute(text(f"PRAGMA max_page_count = {pages}"))
                await uow.conn.execute(
                    insert(accounts).values(
                        id="acct_big", name="x" * 5_000_000, created_at=clock.now()
                    )
                )
        found = outage(raised.value)
        assert found is not None
        assert found.kind == "full"
    finally:
        await db.dispose()


def test_what_counts_as_an_outage() -> None:
    assert outage(ValueError("no")) is None
    assert outage(asyncpg.UniqueViolationError("duplicate")) is None
    assert (found := outage(asyncpg.DiskFullError("no space"))) is not None
    assert found.kind == "full"
    assert (found := outage(OSError(28, "No space left on device"))) is not None
    assert found.kind == "full"
    assert (found := outage(asyncpg.AdminShutdownError("shutting down"))) is not None
    assert found.kind == "unavailable"
    assert (found := outage(ConnectionRefusedError(111, "refused"))) is not None
    assert found.kind == "unavailable"


def test_psycopg_errors_say_the_same() -> None:
    """The synchronous hosts' driver (the WSGI middleware, Flask, Django): a refused connection,
    a statement timeout, and a plain SQL error that is no outage."""
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    assert (found := outage(refused.value)) is not None
    assert found.kind == "unavailable"
    with psycopg.connect(PG_SERVER) as conn:
        conn.execute("SET statement_timeout = 10")
        with pytest.raises(psycopg.errors.QueryCanceled) as slow:
            conn.execute("SELECT pg_sleep(1)")
        assert (found := outage(slow.value)) is not None
        assert found.kind == "busy"
        conn.rollback()
        with pytest.raises(psycopg.errors.UndefinedTable) as wrong:
            conn.execute("SELECT * FROM no_such_table")
        assert outage(wrong.value) is None
