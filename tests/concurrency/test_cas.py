"""Compare-and-set on both backends: the precondition is the WHERE clause, never a prior read."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from support import new_account, sync_connection
from ustun import clock
from ustun.concurrency import (
    GuardRejected,
    Version,
    compare_and_delete,
    compare_and_set,
    delete_plan,
    insert_if_absent,
    new_generation,
    set_plan,
)
from ustun.concurrency.cas import AnyRow
from ustun.errors import NotFoundError, PreconditionFailedError
from ustun.http.preconditions import Preconditions
from ustun.service.resources.schema import documents
from ustun.store import Database
from ustun.store.plans import Plan, run, run_sync


def _pre(**headers: str) -> Preconditions:
    return Preconditions.from_headers((k.replace("_", "-"), v) for k, v in headers.items())


async def _document(db: Database, account_id: str, doc_id: str = "d") -> Version:
    now = clock.now()
    async with db.unit_of_work() as uow:
        row = await insert_if_absent(
            uow.conn,
            documents,
            {
                "account_id": account_id,
                "id": doc_id,
                "title": "t",
                "body": "0",
                "version": 1,
                "generation": new_generation(),
                "created_at": now,
                "updated_at": now,
            },
        )
    return Version.of(row)


async def test_only_the_matching_version_is_written(db: Database) -> None:
    account = await new_account(db, "cas")
    v1 = await _document(db, account)
    key = [documents.c.account_id == account, documents.c.id == "d"]
    async with db.unit_of_work() as uow:
        row = await compare_and_set(
            uow.conn, documents, where=key, pre=_pre(if_match=str(v1.etag)), values={"body": "1"}
        )
    assert Version.of(row) == Version(2, v1.generation)
    with pytest.raises(PreconditionFailedError):
        async with db.unit_of_work() as uow:
            await compare_and_set(
                uow.conn,
                documents,
                where=key,
                pre=_pre(if_match=str(v1.etag)),
                values={"body": "x"},
            )
    with pytest.raises(NotFoundError):
        async with db.unit_of_work() as uow:
            await compare_and_set(
                uow.conn,
                documents,
                where=[documents.c.account_id == account, documents.c.id == "nope"],
                pre=_pre(if_match="*"),
                values={"body": "x"},
            )
    async with db.read() as conn:
        assert await conn.scalar(select(documents.c.body).where(*key)) == "1"


async def test_a_guard_failure_is_told_apart_from_a_stale_version(db: Database) -> None:
    account = await new_account(db, "cas")
    v1 = await _document(db, account)
    key = [documents.c.account_id == account, documents.c.id == "d"]
    with pytest.raises(GuardRejected) as refused:
        async with db.unit_of_work() as uow:
            await compare_and_set(
                uow.conn,
                documents,
                where=key,
                pre=_pre(if_match=str(v1.etag)),
                values={"body": "x"},
                guard=documents.c.body == "something else",
            )
    assert refused.value.current.body == "0"


async def test_insert_if_absent_and_delete(db: Database) -> None:
    account = await new_account(db, "cas")
    v1 = await _document(db, account)
    with pytest.raises(PreconditionFailedError):
        await _document(db, account)
    key = [documents.c.account_id == account, documents.c.id == "d"]
    with pytest.raises(PreconditionFailedError):
        async with db.unit_of_work() as uow:
            await compare_and_delete(uow.conn, documents, where=key, pre=_pre(if_match='W/"1"'))
    async with db.unit_of_work() as uow:
        gone = await compare_and_delete(
            uow.conn, documents, where=key, pre=_pre(if_match=f'"0", {v1.etag}')
        )
    assert Version.of(gone) == v1
    v1_again = await _document(db, account)
    assert v1_again.number == 1
    assert v1_again.etag != v1.etag


async def test_concurrent_writers_with_one_tag_exactly_one_wins(db: Database) -> None:
    account = await new_account(db, "cas")
    v1 = await _document(db, account)
    key = [documents.c.account_id == account, documents.c.id == "d"]

    async def write(n: int) -> bool:
        try:
            async with db.unit_of_work() as uow:
                await compare_and_set(
                    uow.conn,
                    documents,
                    where=key,
                    pre=_pre(if_match=str(v1.etag)),
                    values={"body": str(n)},
                )
        except PreconditionFailedError:
            return False
        return True

    results = await asyncio.gather(*(write(n) for n in range(10)))
    assert results.count(True) == 1
    async with db.read() as conn:
        assert await conn.scalar(select(documents.c.version).where(*key)) == 2


async def test_the_same_compare_and_set_runs_on_a_synchronous_connection(
    db: Database, database_url: str
) -> None:
    """The plan behind `compare_and_set` on a DB-API connection (sqlite3, psycopg): the same
    row and version as on the async engine, and the same refusals."""
    account = await new_account(db, "cas-sync")
    tags = {doc: await _document(db, account, doc) for doc in ("on-async", "on-sync")}

    def write(doc_id: str, version: Version) -> Plan[AnyRow]:
        where = [documents.c.account_id == account, documents.c.id == doc_id]
        return set_plan(
            documents, where=where, pre=_pre(if_match=str(version.etag)), values={"body": "1"}
        )

    def remove(doc_id: str, version: Version) -> Plan[AnyRow]:
        where = [documents.c.account_id == account, documents.c.id == doc_id]
        return delete_plan(documents, where=where, pre=_pre(if_match=str(version.etag)))

    async with db.unit_of_work() as uow:
        on_async = await run(write("on-async", tags["on-async"]), uow.conn)
    with sync_connection(database_url) as conn:
        on_sync = run_sync(write("on-sync", tags["on-sync"]), conn)
    assert (on_sync.body, on_sync.version) == (on_async.body, on_async.version) == ("1", 2)
    with sync_connection(database_url) as conn:
        with pytest.raises(PreconditionFailedError):
            run_sync(write("on-sync", tags["on-sync"]), conn)
        with pytest.raises(NotFoundError):
            run_sync(remove("none", tags["on-sync"]), conn)
        gone = run_sync(remove("on-sync", Version.of(on_sync)), conn)
    assert gone.version == 2
    async with db.read() as read:
        left = await read.scalars(select(documents.c.id).where(documents.c.account_id == account))
        assert set(left) == {"on-async"}
