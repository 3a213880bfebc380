"""Idempotency records in the application's own database (SQLite or PostgreSQL).

The claim is one upsert: insert the key as in progress, or take the row over when the record
expired or its holder's lease ran out; the row count (1 or 0) says whether we won.

With `max_bytes`, a scope whose stored answers (headers and body) hold that many bytes is
refused new keys (`OverQuota`) until enough of them expire; its keys already stored still
answer. Triggers keep each scope's bytes in `idempotency_usage` (migration 0016) in the same
transaction as every write of a record; the check reads them in the statement that reads the
key, so it costs no round trip. Requests under way when the quota is reached still store their
answers: the quota may be passed by as many answers as there are concurrent requests.

The writes of a request (claim, lock-and-read, settle, complete, release) are plans
(`store.plans`), written once: the store runs them on its async connection, and a host
framework's synchronous connection can run the same ones (`run_sync`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Boolean,
    Executable,
    Table,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from ustun import clock
from ustun.defaults import DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL
from ustun.idempotency.records import (
    Change,
    Claim,
    Claimed,
    Found,
    Lookup,
    OverQuota,
    Record,
    SealedAnswer,
    State,
    StoredResponse,
    new_lease_token,
    transition,
)
from ustun.idempotency.sealing import NO_STORE, forbids_storing
from ustun.idempotency.tables import idempotency_records as records
from ustun.idempotency.tables import idempotency_usage as usage
from ustun.store import Database
from ustun.store.migrate import RequiredTables
from ustun.store.plans import Plan, Query, count, rows, run
from ustun.store.statements import FastRow, Statement
from ustun.store.uow import Held, UnitOfWork

_CLAIM_ATTEMPTS = 3
# How often the sweeper purges expired records by default: a full scope's bytes come back then.
_RETRY_HINTS = 10_000  # scopes whose refusal's Retry-After a store remembers
# A purge deletes expired records in transactions of at most PURGE_BATCH rows (on SQLite, and at
# most PURGE_BATCH_BYTES of bodies), each meant to hold the write lock (SQLite's, or the rows' on
# PostgreSQL) for about PURGE_BATCH_SECONDS: the first is small, a quick one doubles the next, a
# slower one shrinks it.
PURGE_BATCH = 500
PURGE_BATCH_BYTES = 1_048_576
PURGE_FIRST_BATCH = 8
PURGE_BATCH_SECONDS = 0.02
# The states this module writes, from the transition table (looked up once, not per request).
# A claim's upsert also takes over an in-progress record whose lease ran out: the same state.
_CLAIMED = transition(State.ABSENT, Change.CLAIM).value
_COMPLETED = transition(State.IN_PROGRESS, Change.COMPLETE).value
_SETTLED = transition(State.ABSENT, Change.SETTLE).value


def _live(scope: str, key: str) -> dict[str, Any]:
    """`_READ`'s parameters: the key, and now (a record expired by then counts as absent)."""
    return {"scope": scope, "key": key, "now": clock.now()}


def _first(rows: Sequence[Any]) -> Record | None:
    return _record(rows[0]) if rows else None


def _found(row: FastRow) -> Record | None:
    """The record of an outer-joined row, if it found one."""
    return _record(row) if row.state is not None else None


def _ours(taken: Record | None) -> bool:
    """Whether `settle_key` settled the key (no record was there first)."""
    return taken is None


def _full(used: int, max_bytes: int | None) -> bool:
    return max_bytes is not None and used >= max_bytes


def _record(row: FastRow) -> Record:
    response = None
    if row.status is not None:
        headers = StoredResponse.headers_from_json(row.headers or "[]")
        response = StoredResponse(row.status, headers, row.body)
    return Record(row.fingerprint, State(row.state), row.locked_until, response)


def _upsert_statement(insert: Callable[[Table], Any]) -> Executable:
    """The claim/settle upsert, built once: per request only its parameters change."""
    columns = [c.name for c in records.c if c.name not in ("scope", "key")]
    stmt = insert(records).values({c.name: bindparam(c.name, type_=c.type) for c in records.c})
    now = bindparam("now", type_=records.c.expires_at.type)
    upsert: Executable = stmt.on_conflict_do_update(
        index_elements=[records.c.scope, records.c.key],
        set_={name: stmt.excluded[name] for name in columns},
        where=or_(
            records.c.expires_at <= now,
            and_(records.c.state == State.IN_PROGRESS.value, records.c.locked_until <= now),
        ),
    )
    return upsert


_UPSERT = Statement(
    _upsert_statement(postgresql.insert),
    per_dialect={"sqlite": _upsert_statement(sqlite.insert)},
)
_READ = Statement(
    select(
        records.c.fingerprint,
        records.c.state,
        records.c.locked_until,
        records.c.status,
        records.c.headers,
        records.c.body,
    ).where(
        records.c.scope == bindparam("scope"),
        records.c.key == bindparam("key"),
        records.c.expires_at > bindparam("now", type_=records.c.expires_at.type),
    )
)
_COMPLETE = Statement(
    update(records)
    .where(
        records.c.scope == bindparam("scope"),
        records.c.key == bindparam("key"),
        records.c.lease_token == bindparam("lease_token"),
    )
    .values(
        state=_COMPLETED,
        status=bindparam("status", type_=records.c.status.type),
        headers=bindparam("headers", type_=records.c.headers.type),
        body=bindparam("body", type_=records.c.body.type),
        expires_at=bindparam("expires_at", type_=records.c.expires_at.type),
    )
)

# A key's live record (if any; an outer join, so there is always one row) and its scope's bytes
# of stored answers, the sum of their shards.
_KEY_AND_USAGE = """
    (SELECT CAST(coalesce(sum(u.bytes), 0) AS BIGINT) FROM idempotency_usage AS u
     WHERE u.scope = :scope) AS used,
    r.fingerprint, r.state, r.locked_until, r.status, r.headers, r.body
    FROM (SELECT 1) AS one
    LEFT JOIN idempotency_records AS r
      ON r.scope = :scope AND r.key = :key AND r.expires_at > :now"""
_KEY_AND_USAGE_COLUMNS = {
    "used": usage.c.bytes.type,
    "fingerprint": records.c.fingerprint.type,
    "state": records.c.state.type,
    "locked_until": records.c.locked_until.type,
    "status": records.c.status.type,
    "headers": records.c.headers.type,
    "body": records.c.body.type,
}
_READ_CHECKED = Statement(
    text("SELECT" + _KEY_AND_USAGE)
    .bindparams(bindparam("now", type_=records.c.expires_at.type))
    .columns(**_KEY_AND_USAGE_COLUMNS)
)


def _locked_and_read(lock: str) -> Executable:
    """`_READ_CHECKED`'s read, after a column `locked` that says whether `lock` took the key."""
    return (
        text(f"SELECT {lock} AS locked," + _KEY_AND_USAGE)
        .bindparams(bindparam("now", type_=records.c.expires_at.type))
        .columns(locked=Boolean, **_KEY_AND_USAGE_COLUMNS)
    )


# PostgreSQL: take the key's transaction-scoped advisory lock (held until COMMIT/ROLLBACK, or
# until the session dies) and read as `_READ_CHECKED`, in one statement. A 64-bit hash of the
# length-prefixed scope and key names the lock: two keys sharing it would only wait on each other.
# SQLite has no such lock: its writers queue, and a duplicate that ran meanwhile finds the
# record when it settles, and rolls back.
_LOCK_AND_READ = Statement(
    _locked_and_read(
        """pg_try_advisory_xact_lock(hashtextextended(
             length(CAST(:scope AS text)) || ':' || CAST(:scope AS text) || CAST(:key AS text), 0
           ))"""
    ),
    per_dialect={"sqlite": _locked_and_read("1")},
)
_RELEASE = Statement(
    delete(records).where(
        records.c.scope == bindparam("scope"),
        records.c.key == bindparam("key"),
        records.c.lease_token == bindparam("lease_token"),
    )
)


# PostgreSQL: the oldest expired records, at most `batch`, none that another purge holds.
_PURGE = Statement(
    delete(records).where(
        tuple_(records.c.scope, records.c.key).in_(
            select(records.c.scope, records.c.key)
            .where(records.c.expires_at <= bindparam("now", type_=records.c.expires_at.type))
            .order_by(records.c.expires_at)
            .limit(bindparam("batch"))
            .with_for_update(skip_locked=True)
        )
    ),
    # SQLite: as many of those as fit in `bytes` of bodies (at least one). Deleting a body
    # reads every page of it to free it, so the bytes bound a batch's time where rows do not.
    # length() of a body reads only its size.
    per_dialect={
        "sqlite": text(
            """DELETE FROM idempotency_records WHERE rowid IN (
                SELECT rowid FROM (
                    SELECT rowid, size,
                        sum(size) OVER (ORDER BY expires_at, rowid ROWS UNBOUNDED PRECEDING) AS upto
                    FROM (SELECT rowid, expires_at, coalesce(length(body), 0) AS size
                          FROM idempotency_records WHERE expires_at <= :now
                          ORDER BY expires_at LIMIT :batch))
                WHERE upto - size < :bytes)"""
        ).bindparams(bindparam("now", type_=records.c.expires_at.type))
    },
)
_OLDEST = Statement(
    select(func.min(records.c.expires_at).label("oldest")).where(
        records.c.scope == bindparam("scope")
    )
)


def _upsert(
    scope: str,
    key: str,
    fingerprint: str,
    token: str,
    values: dict[str, Any],
    now: datetime,
    ttl: float,
) -> Query:
    """Insert the record, or replace one that expired or whose lease ran out. No RETURNING:
    the count of rows changed (1 or 0) says whether the insert or the takeover happened."""
    return count(
        _UPSERT,
        {
            "scope": scope,
            "key": key,
            "fingerprint": fingerprint,
            "lease_token": token,
            "status": None,
            "headers": None,
            "body": None,
            "created_at": now,
            "expires_at": now + timedelta(seconds=ttl),
            "now": now,
            **values,
        },
    )


def claim_key(
    scope: str, key: str, fingerprint: str, *, lease: float, ttl: float, max_bytes: int | None
) -> Plan[Claimed | Lookup]:
    """Hold the key as in progress: `Claimed`; or what holds it (a `Lookup` of its record), or,
    with `max_bytes`, a new key of a scope at its quota (a `Lookup` that is `full`)."""
    if max_bytes is not None:
        [row] = yield rows(_READ_CHECKED, _live(scope, key))
        found = _found(row)
        if found is not None and found.answers(clock.now()):
            return Lookup(found, full=False)
        if _full(row.used, max_bytes):
            return Lookup(None, full=True)
    for _ in range(_CLAIM_ATTEMPTS):
        now, token = clock.now(), new_lease_token()
        claimed = {"state": _CLAIMED, "locked_until": now + timedelta(seconds=lease)}
        if (yield _upsert(scope, key, fingerprint, token, claimed, now, ttl)) == 1:
            return Claimed(token)
        found = _first((yield rows(_READ, _live(scope, key))))
        if found is not None:
            return Lookup(found, full=False)
        # Released between our upsert and our read: try again.
    raise RuntimeError(f"could not claim idempotency key {key!r}: it keeps changing hands")


def lock_key(scope: str, key: str, *, max_bytes: int | None) -> Plan[Lookup]:
    """Hold the key until the transaction ends (PostgreSQL), and read its record and whether
    its scope is at `max_bytes`. While held, no other transaction can hold it; a crash releases
    it with the rolled-back transaction."""
    [row] = yield rows(_LOCK_AND_READ, _live(scope, key))
    return Lookup(_found(row), _full(row.used, max_bytes), held=bool(row.locked))


def settle_key(
    scope: str, key: str, fingerprint: str, response: StoredResponse, *, ttl: float
) -> Plan[Record | None]:
    """Claim and complete a free key in one statement: None when the record is ours now; else
    the live record that was there first (and the caller must roll its transaction back)."""
    now = clock.now()
    settled = {
        "state": _SETTLED,
        "locked_until": now,
        "status": response.status,
        "headers": response.headers_json(),
        "body": response.body,
    }
    if (yield _upsert(scope, key, fingerprint, new_lease_token(), settled, now, ttl)) == 1:
        return None
    found = _first((yield rows(_READ, _live(scope, key))))
    if found is None:  # impossible: our upsert holds the row lock
        raise RuntimeError(f"idempotency record {key!r} vanished under a write lock")
    return found


def complete_key(
    scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
) -> Plan[bool]:
    """Store the response of the claim fenced by `lease_token`; False when the lease was lost."""
    changed = yield count(
        _COMPLETE,
        {
            "scope": scope,
            "key": key,
            "lease_token": lease_token,
            "status": response.status,
            "headers": response.headers_json(),
            "body": response.body,
            "expires_at": clock.now() + timedelta(seconds=ttl),
        },
    )
    return bool(changed == 1)


def read_key(scope: str, key: str) -> Plan[Record | None]:
    """The live record of a key, if any (an expired one counts as absent)."""
    return _first((yield rows(_READ, _live(scope, key))))


def _come_back_at(oldest: datetime | None, now: datetime) -> datetime:
    """When a new key of a full scope may come back: once its oldest record (expiring at
    `oldest`) has expired and been swept."""
    expires = now if oldest is None else max(oldest, now)
    return expires + timedelta(seconds=DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL)


def come_back_at(scope: str) -> Plan[datetime]:
    """`_come_back_at` for `scope` (reads all of its records)."""
    [row] = yield rows(_OLDEST, {"scope": scope})
    return _come_back_at(row.oldest, clock.now())


def release_key(scope: str, key: str, lease_token: str) -> Plan[None]:
    """Delete the claim if `lease_token` still fences it."""
    yield count(_RELEASE, {"scope": scope, "key": key, "lease_token": lease_token})


class SqlRecordStore:
    """Records in the `idempotency_records` table of `db`, written in the handler's transaction
    or in transactions of their own.

    `create_tables` (default: on SQLite only) lets `prepare` migrate a database that lacks it.
    `max_bytes` (None: no limit) is each scope's quota of bytes of stored answers.
    """

    def __init__(
        self, db: Database, *, create_tables: bool | None = None, max_bytes: int | None = None
    ) -> None:
        self.db = db
        self._tables = RequiredTables(db, records.name, usage.name, create=create_tables)
        # PostgreSQL can hold a key for the length of a transaction (`lock_key`); on SQLite a
        # key is read before the transaction, which would take the write lock for a replay.
        self._locks = not db.is_sqlite
        self.max_bytes = max_bytes
        self._retry_at: dict[str, datetime] = {}  # scope → when its refusals say to come back

    @property
    def transactional(self) -> SqlRecordStore:
        """Itself: it writes in the database the handlers write in."""
        return self

    def hold(self) -> AbstractAsyncContextManager[Held]:
        """`Database.hold()` of its database."""
        return self.db.hold()

    async def look(self, held: Held, scope: str, key: str) -> Lookup:
        """On PostgreSQL, hold the key from the first statement of `held`'s transaction and
        read it there; on SQLite, read it alone (one read, no write lock)."""
        if self._locks:
            lookup = lock_key(scope, key, max_bytes=self.max_bytes)
            return await run(lookup, (await held.begin()).conn)
        [row] = await _READ_CHECKED.read(self.db, _live(scope, key))
        return Lookup(_found(row), _full(row.used, self.max_bytes))

    async def over_quota(self, scope: str) -> OverQuota:
        """The refusal of a new key of `scope`, at its quota: come back once its oldest record
        has expired and been swept. Looked up at most once a sweep interval per scope (the
        look-up reads all of the scope's records), then remembered."""
        if self.max_bytes is None:
            raise RuntimeError("this store has no quota (max_bytes=None)")
        now = clock.now()
        retry_at = self._retry_at.get(scope)
        if retry_at is None or retry_at <= now:
            [row] = await _OLDEST.read(self.db, {"scope": scope})
            retry_at = _come_back_at(row.oldest, now)
            if len(self._retry_at) >= _RETRY_HINTS:
                self._retry_at.clear()
            self._retry_at[scope] = retry_at
        return OverQuota(self.max_bytes, (retry_at - now) / timedelta(seconds=1))

    async def prepare(self) -> None:
        """Create the table or raise `TablesMissing` with the command to run (once, at startup)."""
        await self._tables.ensure()

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float
    ) -> Claim:
        """Claim in a transaction of its own, committed at once so duplicates see it."""
        plan = claim_key(scope, key, fingerprint, lease=lease, ttl=ttl, max_bytes=self.max_bytes)
        async with self.db.unit_of_work() as uow:
            claimed = await run(plan, uow.conn)
        if isinstance(claimed, Claimed):
            return claimed
        if claimed.record is not None:
            return Found(claimed.record)
        return await self.over_quota(scope)

    async def settle_in(
        self,
        uow: UnitOfWork,
        scope: str,
        key: str,
        fingerprint: str,
        response: StoredResponse,
        *,
        ttl: float,
    ) -> Record | None:
        """Claim and complete in one statement of `uow`'s transaction (no prior claim): None
        when the record is ours now; else the live record that was there first, and the
        caller must roll its transaction back. As the last statement of `uow`'s last
        before-commit hook it ends the transaction (`UnitOfWork.run_last`: on SQLite the
        write and its COMMIT, or ROLLBACK, go to the driver's thread in one hand-off)."""
        plan = settle_key(scope, key, fingerprint, response, ttl=ttl)
        return await uow.run_last(plan, commit_if=_ours)

    async def settle(
        self, scope: str, key: str, fingerprint: str, response: StoredResponse, *, ttl: float
    ) -> Record | None:
        """`settle_in` in a transaction of its own."""
        async with self.db.unit_of_work() as uow:
            return await self.settle_in(uow, scope, key, fingerprint, response, ttl=ttl)

    async def read(self, scope: str, key: str) -> Record | None:
        """The live record of a key, if any (an expired one counts as absent)."""
        return _first(await _READ.read(self.db, _live(scope, key)))

    async def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response in a transaction of its own."""
        async with self.db.unit_of_work() as uow:
            return await self.complete_in(uow, scope, key, lease_token, response, ttl=ttl)

    async def complete_in(
        self,
        uow: UnitOfWork,
        scope: str,
        key: str,
        lease_token: str,
        response: StoredResponse,
        *,
        ttl: float,
    ) -> bool:
        """Store the response in `uow`'s transaction; False when the lease was lost (and the
        caller must roll its transaction back). As the last statement of `uow`'s last
        before-commit hook it ends the transaction, as `settle_in` does."""
        plan = complete_key(scope, key, lease_token, response, ttl=ttl)
        return await uow.run_last(plan, commit_if=bool)

    async def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        async with self.db.unit_of_work() as uow:
            await run(release_key(scope, key, lease_token), uow.conn)

    async def sealed_answers(self, uow: UnitOfWork) -> list[SealedAnswer]:
        """The stored answers kept sealed (`no-store`), locked in `uow` until it ends."""
        candidates = (
            await uow.conn.execute(
                select(records.c.scope, records.c.key, records.c.headers, records.c.body)
                .where(
                    records.c.body.is_not(None), func.lower(records.c.headers).contains(NO_STORE)
                )
                .with_for_update()
            )
        ).all()
        return [
            SealedAnswer(row.scope, row.key, row.body)
            for row in candidates
            if forbids_storing(StoredResponse.headers_from_json(row.headers))
        ]

    async def reseal_answer(self, uow: UnitOfWork, answer: SealedAnswer) -> None:
        """Write `answer`'s body (sealed anew) over the stored one, in `uow`."""
        await uow.conn.execute(
            update(records)
            .where(records.c.scope == answer.scope, records.c.key == answer.key)
            .values(body=answer.body)
        )

    async def purge_expired(self) -> int:
        """Delete the records expired by now (they already count as absent); return how many.

        In transactions of at most PURGE_BATCH rows, sized to hold the write lock for about
        PURGE_BATCH_SECONDS each, with a pause as long as the last one between them: other
        writers (and other processes on a SQLite file) get at least half of the time.
        """
        now, size, purged = clock.now(), PURGE_FIRST_BATCH, 0
        while True:
            async with self.db.unit_of_work() as uow:
                began = time.monotonic()
                deleted = await _PURGE.count(
                    uow.conn, {"now": now, "batch": size, "bytes": PURGE_BATCH_BYTES}
                )
            took = time.monotonic() - began
            purged += deleted
            if not deleted:
                return purged
            if took > PURGE_BATCH_SECONDS:
                size = max(1, int(size * PURGE_BATCH_SECONDS / took))
            elif took < PURGE_BATCH_SECONDS / 2:
                size = min(PURGE_BATCH, size * 2)
            await asyncio.sleep(took)
