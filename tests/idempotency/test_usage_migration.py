"""Migration 0016 counts the answers already stored, and goes down and up again (both backends)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, delete, func, insert, inspect, select

from support import BACKENDS, drop_pg_database, make_pg_database
from ustun import clock
from ustun.idempotency.tables import idempotency_records as records
from ustun.idempotency.tables import idempotency_usage as usage
from ustun.store import Database
from ustun.store.migrate import _config, upgrade


@pytest.fixture(params=BACKENDS)
async def old_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A database of its own at revision 0015, the one before the usage table."""
    name, url = None, f"sqlite:///{tmp_path / 'old.db'}"
    if request.param == "postgresql":
        name, url = await asyncio.to_thread(make_pg_database)
    db = Database(url)
    try:
        await upgrade(db, "0015")
        yield db
    finally:
        await db.dispose()
        if name is not None:
            await asyncio.to_thread(drop_pg_database, name)


def _record(scope: str, key: str, headers: str | None, body: bytes | None) -> dict[str, object]:
    now = clock.now()
    return {
        "scope": scope,
        "key": key,
        "fingerprint": "f",
        "state": "completed" if headers is not None else "in_progress",
        "lease_token": key,
        "locked_until": now,
        "status": 201 if headers is not None else None,
        "headers": headers,
        "body": body,
        "created_at": now,
        "expires_at": now + timedelta(hours=1),
    }


async def _usage(db: Database) -> dict[str, int]:
    async with db.read() as conn:
        rows = await conn.execute(
            select(usage.c.scope, func.sum(usage.c.bytes)).group_by(usage.c.scope)
        )
        return {scope: int(total) for scope, total in rows if total}


async def _tables(db: Database) -> set[str]:
    async with db.engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def test_0016_counts_the_stored_answers_and_goes_down_and_up_again(
    old_db: Database,
) -> None:
    async with old_db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(records),
            [
                _record("a", "1", '[["content-type","text/plain"]]', b"x" * 100),
                _record("a", "2", "[]", b""),
                _record("b", "1", None, None),  # a claim: no answer yet
                _record("c", "1", "[]", None),  # an answer whose body was not kept
            ],
        )
    await upgrade(old_db)
    assert await _usage(old_db) == {"a": 31 + 100 + 2, "c": 2}

    def down(conn: Connection) -> None:
        command.downgrade(_config(conn), "0015")

    async with old_db.engine.begin() as conn:
        await conn.run_sync(down)
    assert "idempotency_usage" not in await _tables(old_db)
    async with old_db.unit_of_work() as uow:  # no trigger is left behind to fail a write
        await uow.conn.execute(delete(records).where(records.c.scope == "c"))
        await uow.conn.execute(insert(records), [_record("d", "1", "[]", b"yz")])

    await upgrade(old_db)
    assert await _usage(old_db) == {"a": 133, "d": 4}
    async with old_db.unit_of_work() as uow:
        await uow.conn.execute(delete(records).where(records.c.scope == "a"))
    assert await _usage(old_db) == {"d": 4}
