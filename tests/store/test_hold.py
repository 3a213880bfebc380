"""`Database.hold()`: the holder, not the handler, commits the unit of work."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import insert, select

from ustun import clock
from ustun.store import Database
from ustun.store.tables import accounts


async def named(db: Database, name: str) -> bool:
    async with db.read() as conn:
        return await conn.scalar(select(accounts.c.id).where(accounts.c.name == name)) is not None


async def add(db: Database, name: str) -> None:
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts).values(id=uuid.uuid4().hex[:20], name=name, created_at=clock.now())
        )


async def test_inner_units_of_work_commit_when_the_hold_ends(db: Database) -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    async with db.hold() as held:
        await add(db, first)
        assert held.uow is not None
        await add(db, second)  # joins the same transaction
        assert await named(db, first)  # reads inside the hold see its writes
        async with db.unit_of_work() as uow:
            assert uow is held.uow
            assert await held.begin() is uow
    assert await named(db, first)
    assert await named(db, second)


async def test_an_error_in_the_hold_rolls_everything_back(db: Database) -> None:
    name = uuid.uuid4().hex
    with pytest.raises(RuntimeError):
        async with db.hold():
            await add(db, name)
            raise RuntimeError("after the inner block finished")
    assert not await named(db, name)


async def test_a_hold_that_never_writes_opens_no_transaction(db: Database) -> None:
    async with db.hold() as held:
        assert held.uow is None
    async with db.unit_of_work():  # the write lock was never taken, so this does not wait
        pass
