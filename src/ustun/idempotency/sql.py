"""Idempotency records in the application's own database (SQLite or PostgreSQL).

The claim is one upsert: insert the key as in progress, or take the row over when the record
expired or its holder's lease ran out; the row count (1 or 0) says whether we won.

With `max_bytes`, a scope whose stored answers (headers and body) hold that many bytes is
refused new keys (`OverQuota`) until enough of them expire; its keys already stored still
answer. Triggers keep each scope's bytes in `idempotency_usage` (migration 0016) in the same
transaction as every write of a record; the check reads them in the statement that reads the
key, so it costs no round trip. Requests under way when the quota is reached still store their
answers: the quota may be passed by as many answers as there are concurrent requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
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
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock
from ustun.idempotency.records import (
    Change,
    Claim,
    Claimed,
    Found,
    OverQuota,
    Record,
    State,
    StoredResponse,
    new_lease_token,
    transition,
)
from ustun.idempotency.tables import idempotency_records as records
from ustun.idempotency.tables import idempotency_usage as usage
from ustun.store import Database
from ustun.store.migrate import RequiredTables
from ustun.store.statements import FastRow, Statement

_CLAIM_ATTEMPTS = 3
# How often the sweeper purges expired records by default: a full scope's bytes come back then.
DEFAULT_SWEEP_INTERVAL = 60.0
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
# PostgreSQL: take the key's transaction-scoped advisory lock (held until COMMIT/ROLLBACK, or
# until the session dies) and read as `_READ_CHECKED`, in one statement. A 64-bit hash of the
# length-prefixed scope and key names the lock: two keys sharing it would only wait on each other.
_LOCK_AND_READ = Statement(
    text(
        """SELECT pg_try_advisory_xact_lock(hashtextextended(
             length(CAST(:scope AS text)) || ':' || CAST(:scope AS text) || CAST(:key AS text), 0
           )) AS locked,"""
        + _KEY_AND_USAGE
    )
    .bindparams(bindparam("now", type_=records.c.expires_at.type))
    .columns(locked=Boolean, **_KEY_AND_USAGE_COLUMNS)
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


class SqlRecordStore:
    """Records in the `idempotency_records` table of `db`.

    `create_tables` (default: on SQLite only) lets `prepare` migrate a database that lacks it.
    `max_bytes` (None: no limit) is each scope's quota of bytes of stored answers.
    """

    def __init__(
        self, db: Database, *, create_tables: bool | None = None, max_bytes: int | None = None
    ) -> None:
        self.db = db
        self._tables = RequiredTables(db, records.name, usage.name, create=create_tables)
        # PostgreSQL can hold a key for the length of a transaction (see `lock_in`).
        self.can_lock = not db.is_sqlite
        self.max_bytes = max_bytes
        self._retry_at: dict[str, datetime] = {}  # scope → when its refusals say to come back

    def _full(self, used: int) -> bool:
        return self.max_bytes is not None and used >= self.max_bytes

    async def lock_in(
        self, conn: AsyncConnection, scope: str, key: str
    ) -> tuple[bool, Record | None, bool]:
        """Hold the key until the caller's transaction ends (PostgreSQL), and read its record.

        Returns whether the key is now held, its live record if any, and whether its scope is
        at its quota (then a new request is refused: `over_quota`). While held, no other
        transaction can hold the key; a crash releases it with the rolled-back transaction.
        """
        [row] = await _LOCK_AND_READ.rows(conn, _live(scope, key))
        return bool(row.locked), _found(row), self._full(row.used)

    async def read_checked(self, scope: str, key: str) -> tuple[Record | None, bool]:
        """A key's live record, if any, and whether its scope is at its quota: one read."""
        [row] = await _READ_CHECKED.read(self.db, _live(scope, key))
        return _found(row), self._full(row.used)

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
            expires = now if row.oldest is None else max(row.oldest, now)
            retry_at = expires + timedelta(seconds=DEFAULT_SWEEP_INTERVAL)
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
        async with self.db.unit_of_work() as uow:
            if self.max_bytes is not None:
                [row] = await _READ_CHECKED.rows(uow.conn, _live(scope, key))
                found = _found(row)
                if found is not None and found.answers(clock.now()):
                    return Found(found)
                if self._full(row.used):
                    return await self.over_quota(scope)
            for _ in range(_CLAIM_ATTEMPTS):
                now = clock.now()
                token = new_lease_token()
                values = {
                    "state": _CLAIMED,
                    "locked_until": now + timedelta(seconds=lease),
                }
                if await self._upsert(uow.conn, scope, key, fingerprint, token, values, now, ttl):
                    return Claimed(token)
                found = await self._read(uow.conn, scope, key)
                if found is not None:
                    return Found(found)
                # Released between our upsert and our read: try again.
        raise RuntimeError(f"could not claim idempotency key {key!r}: it keeps changing hands")

    async def settle_in(
        self,
        conn: AsyncConnection,
        scope: str,
        key: str,
        fingerprint: str,
        response: StoredResponse,
        *,
        ttl: float,
    ) -> Record | None:
        """Claim and complete in one statement, in the caller's transaction (no prior claim).

        None when the record is now ours; otherwise the live record that was there first, and
        the caller must roll its transaction back.
        """
        now = clock.now()
        values = {
            "state": _SETTLED,
            "locked_until": now,
            "status": response.status,
            "headers": response.headers_json(),
            "body": response.body,
        }
        token = new_lease_token()
        if await self._upsert(conn, scope, key, fingerprint, token, values, now, ttl):
            return None
        found = await self._read(conn, scope, key)
        if found is None:  # impossible: our upsert holds the row lock
            raise RuntimeError(f"idempotency record {key!r} vanished under a write lock")
        return found

    async def settle(
        self, scope: str, key: str, fingerprint: str, response: StoredResponse, *, ttl: float
    ) -> Record | None:
        """`settle_in` in a transaction of its own."""
        async with self.db.unit_of_work() as uow:
            return await self.settle_in(uow.conn, scope, key, fingerprint, response, ttl=ttl)

    async def _upsert(
        self,
        conn: AsyncConnection,
        scope: str,
        key: str,
        fingerprint: str,
        token: str,
        values: dict[str, Any],
        now: datetime,
        ttl: float,
    ) -> bool:
        """Insert the record, or replace one that expired or whose lease ran out; True if won."""
        row = {
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
        }
        # No RETURNING: the row count says whether the insert or the takeover happened.
        return await _UPSERT.count(conn, row) == 1

    async def read(self, scope: str, key: str) -> Record | None:
        """The live record of a key, if any (an expired one counts as absent)."""
        return _first(await _READ.read(self.db, _live(scope, key)))

    async def _read(self, conn: AsyncConnection, scope: str, key: str) -> Record | None:
        return _first(await _READ.rows(conn, _live(scope, key), begin=False))

    async def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response in a transaction of its own."""
        async with self.db.unit_of_work() as uow:
            return await self.complete_in(uow.conn, scope, key, lease_token, response, ttl=ttl)

    async def complete_in(
        self,
        conn: AsyncConnection,
        scope: str,
        key: str,
        lease_token: str,
        response: StoredResponse,
        *,
        ttl: float,
    ) -> bool:
        """Store the response in the caller's transaction; False when the lease was lost."""
        changed = await _COMPLETE.count(
            conn,
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
        return changed == 1

    async def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        async with self.db.unit_of_work() as uow:
            await uow.conn.execute(
                delete(records).where(
                    records.c.scope == scope,
                    records.c.key == key,
                    records.c.lease_token == lease_token,
                )
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
