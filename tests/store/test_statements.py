"""`store.statements`: compiled statements on the driver stay inside the unit of work."""

from __future__ import annotations

import asyncio
import uuid
from contextvars import Context

import pytest
from sqlalchemy import bindparam, insert, select

from ustun import clock
from ustun.store import Database
from ustun.store.statements import Statement
from ustun.store.tables import accounts

_ADD = Statement(
    insert(accounts).values(
        id=bindparam("id"),
        name=bindparam("name"),
        created_at=bindparam("created_at", type_=accounts.c.created_at.type),
    )
)
_NAMED = Statement(
    select(accounts.c.id, accounts.c.created_at).where(accounts.c.name == bindparam("name"))
)


async def _add(db: Database, name: str) -> None:
    async with db.unit_of_work() as uow:
        params = {"id": uuid.uuid4().hex[:20], "name": name, "created_at": clock.now()}
        assert await _ADD.count(uow.conn, params) == 1


async def test_a_driver_write_commits_and_rolls_back_with_the_unit_of_work(db: Database) -> None:
    kept, dropped = uuid.uuid4().hex, uuid.uuid4().hex
    await _add(db, kept)
    with pytest.raises(RuntimeError, match="after the write"):
        async with db.unit_of_work() as uow:
            await _add(db, dropped)  # joins `uow`: its first statement began the transaction
            assert [r.id for r in await _NAMED.rows(uow.conn, {"name": dropped}, begin=False)]
            raise RuntimeError("after the write")
    async with db.read() as conn:
        [row] = await _NAMED.rows(conn, {"name": kept}, begin=False)
        assert await _NAMED.rows(conn, {"name": dropped}, begin=False) == []
    assert row.created_at.tzinfo is not None  # the column type's result processing ran
    assert row._mapping["id"] == row.id == row[0]


async def test_concurrent_driver_writes_each_commit_once(db: Database) -> None:
    """Twenty units of work that begin on the driver, at once: each commits its row once."""
    names = [uuid.uuid4().hex for _ in range(20)]
    await asyncio.gather(*(_add(db, name) for name in names))
    async with db.read() as conn:
        found = [await _NAMED.rows(conn, {"name": name}, begin=False) for name in names]
    assert [len(rows) for rows in found] == [1] * 20


async def test_a_read_sees_committed_rows_outside_and_its_own_writes_inside(db: Database) -> None:
    """`Statement.read`: alone (PostgreSQL: on the autocommit pool), committed rows only, types
    processed; inside a unit of work, its uncommitted writes too."""
    committed, pending = uuid.uuid4().hex, uuid.uuid4().hex
    await _add(db, committed)
    [row] = await _NAMED.read(db, {"name": committed})
    assert row.created_at.tzinfo is not None
    async with db.unit_of_work():
        await _add(db, pending)
        assert len(await _NAMED.read(db, {"name": pending})) == 1
        # A task in a fresh context is outside this unit of work: it sees only committed rows.
        outside = asyncio.create_task(_NAMED.read(db, {"name": pending}), context=Context())
        assert await outside == []
