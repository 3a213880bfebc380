"""The SQL store's write path (claim, lock-and-read, settle, complete, release) is written once,
as plans: run on the async engine (`run`, in a unit of work) and on a synchronous DB-API
connection to the same database (`run_sync`: sqlite3, psycopg), on SQLite and PostgreSQL, they
answer the same and leave the same rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from sqlalchemy import select

from support import sync_connection
from ustun.idempotency.records import Claimed, Lookup, Record, State, StoredResponse
from ustun.idempotency.sql import claim_key, complete_key, lock_key, release_key, settle_key
from ustun.idempotency.tables import idempotency_records as records
from ustun.store import Database
from ustun.store.plans import Plan, run, run_sync

T = TypeVar("T")
ANSWER = StoredResponse(201, (("content-type", "application/json"),), b'{"id": "pay_1"}')
REFUSED = StoredResponse(409, (), b"{}")
TTL = 60.0
# What a row holds that does not depend on when, or by which token, it was written.
COLUMNS = (records.c.fingerprint, records.c.state, records.c.status, records.c.headers)


class Executor:
    """Runs plans on one kind of connection, each in a transaction of its own, committed."""

    def __init__(self, db: Database, url: str, kind: str) -> None:
        self.db, self.url, self.kind = db, url, kind

    async def __call__(self, plan: Plan[T]) -> T:
        if self.kind == "async":
            async with self.db.unit_of_work() as uow:
                return await run(plan, uow.conn)
        with sync_connection(self.url) as conn:
            return run_sync(plan, conn)


def _seen(record: Record | None) -> tuple[Any, ...] | None:
    """A record without its lease's end, which depends on the moment of the claim."""
    return None if record is None else (record.fingerprint, record.state, record.response)


def _looked(lookup: Lookup) -> tuple[Any, ...]:
    return (_seen(lookup.record), lookup.full, lookup.held)


async def _row(db: Database, scope: str, key: str) -> tuple[Any, ...] | None:
    async with db.read() as conn:
        found = (
            await conn.execute(
                select(*COLUMNS, records.c.body).where(
                    records.c.scope == scope, records.c.key == key
                )
            )
        ).one_or_none()
    return None if found is None else tuple(found)


async def _write_path(run_plan: Callable[[Plan[Any]], Any], scope: str) -> list[Any]:
    """Every plan of the write path, in the order a request meets them: what each answered."""
    seen: list[Any] = []
    claimed = await run_plan(claim_key(scope, "c", "fp", lease=30, ttl=TTL, max_bytes=None))
    assert isinstance(claimed, Claimed)
    again = await run_plan(claim_key(scope, "c", "other", lease=30, ttl=TTL, max_bytes=None))
    seen.append(_looked(again))
    seen.append(await run_plan(complete_key(scope, "c", "not-mine", ANSWER, ttl=TTL)))
    seen.append(await run_plan(complete_key(scope, "c", claimed.lease_token, ANSWER, ttl=TTL)))
    seen.append(_looked(await run_plan(lock_key(scope, "c", max_bytes=None))))
    seen.append(_looked(await run_plan(lock_key(scope, "c", max_bytes=1))))
    seen.append(_looked(await run_plan(lock_key(scope, "free", max_bytes=None))))
    full = await run_plan(claim_key(scope, "new", "fp", lease=30, ttl=TTL, max_bytes=1))
    seen.append(_looked(full))
    seen.append(await run_plan(settle_key(scope, "s", "fp", REFUSED, ttl=TTL)))
    seen.append(_seen(await run_plan(settle_key(scope, "s", "fp2", ANSWER, ttl=TTL))))
    released = await run_plan(claim_key(scope, "r", "fp", lease=30, ttl=TTL, max_bytes=None))
    kept = await run_plan(claim_key(scope, "k", "fp", lease=30, ttl=TTL, max_bytes=None))
    assert isinstance(released, Claimed)
    assert isinstance(kept, Claimed)
    seen.append(await run_plan(release_key(scope, "r", released.lease_token)))
    seen.append(await run_plan(release_key(scope, "k", "not-mine")))
    return seen


async def test_the_write_path_answers_and_writes_the_same_on_either_connection(
    db: Database, database_url: str
) -> None:
    scopes = {kind: f"plans-{kind}-{uuid.uuid4().hex}" for kind in ("async", "sync")}
    answers = {
        kind: await _write_path(Executor(db, database_url, kind), scope)
        for kind, scope in scopes.items()
    }
    assert answers["async"] == answers["sync"]
    in_progress = ("fp", State.IN_PROGRESS, None)
    completed = ("fp", State.COMPLETED, ANSWER)
    assert answers["sync"] == [
        (in_progress, False, True),  # the key is taken: what holds it
        False,  # a completion fenced by another token
        True,
        (completed, False, True),
        (completed, True, True),  # its scope's answers are over 1 byte
        (None, False, True),
        (None, True, True),  # a new key of a full scope is not claimed
        None,  # settled: the key is ours
        ("fp", State.COMPLETED, REFUSED),  # settled first by the request before
        None,
        None,
    ]
    rows = {
        kind: [await _row(db, scope, key) for key in ("c", "s", "r", "k", "new")]
        for kind, scope in scopes.items()
    }
    assert rows["async"] == rows["sync"]
    assert rows["sync"] == [
        ("fp", "completed", 201, ANSWER.headers_json(), ANSWER.body),
        ("fp", "completed", 409, "[]", REFUSED.body),
        None,  # released
        ("fp", "in_progress", None, None, None),
        None,
    ]


async def test_a_plan_run_on_one_kind_of_connection_is_seen_by_the_other(
    db: Database, database_url: str
) -> None:
    scope = f"plans-{uuid.uuid4().hex}"
    on_async = Executor(db, database_url, "async")
    on_sync = Executor(db, database_url, "sync")
    claimed = await on_sync(claim_key(scope, "k", "fp", lease=30, ttl=TTL, max_bytes=None))
    assert isinstance(claimed, Claimed)
    assert await on_async(complete_key(scope, "k", claimed.lease_token, ANSWER, ttl=TTL))
    looked = await on_sync(lock_key(scope, "k", max_bytes=None))
    assert _looked(looked) == (("fp", State.COMPLETED, ANSWER), False, True)


@pytest.mark.parametrize("holder", ["async", "sync"])
async def test_postgresql_a_key_locked_on_one_connection_is_busy_on_the_other(
    pg: Database, postgresql_url: str, holder: str
) -> None:
    """The advisory lock of `lock_key` holds across kinds of connection until the holder's
    transaction ends."""
    scope = f"plans-{uuid.uuid4().hex}"
    with sync_connection(postgresql_url) as conn:
        async with pg.unit_of_work() as uow:
            if holder == "async":
                first = await run(lock_key(scope, "k", max_bytes=None), uow.conn)
                second = run_sync(lock_key(scope, "k", max_bytes=None), conn)
            else:
                first = run_sync(lock_key(scope, "k", max_bytes=None), conn)
                second = await run(lock_key(scope, "k", max_bytes=None), uow.conn)
        assert (first.held, second.held) == (True, False)
        conn.connection.rollback()
        assert run_sync(lock_key(scope, "k", max_bytes=None), conn).held
