"""The hand-written peers of `benchmarks/request_path.py`: what engineers write by hand.

Small FastAPI apps, no ustun import, each serving `POST /v1/payments` (authenticated; insert the
payment and its outbox event in one transaction; 201 with Location and ETag) and
`GET /v1/payments/{id}` (authenticated read of one row; 200 with ETag and Last-Modified, 304 on
a matching If-None-Match):

- `asyncpg_app`, `aiosqlite_app` (hand-written): exactly ustun's durable work, no idempotency
  record. asyncpg: one pool, statements prepared by asyncpg's statement cache. aiosqlite: WAL,
  one writer connection behind an asyncio lock with `BEGIN IMMEDIATE`, a few reader connections.
- `asyncpg_six_app`, `aiosqlite_six_app` (six-statement): the same apps, whose POST sends
  ustun's own statements (copied from `ustun.idempotency.sql` and
  `ustun.webhooks.adapters.plans`) to ustun's own tables (the database is made by
  `ustun migrate`, the key by `ustun keys create`), one await per statement: the ceiling of
  ustun's SQL shape. PostgreSQL: BEGIN; take the key's advisory lock and read its record and its
  scope's bytes in one SELECT; INSERT the payment RETURNING it; INSERT the webhook event
  RETURNING its endpoints; INSERT the idempotency record with the response (upsert); COMMIT.
  SQLite has no advisory lock: as ustun there, the key is read first on a reader connection,
  then BEGIN IMMEDIATE and the three INSERTs, COMMIT. A key already answered is replayed.
  Its asyncpg pool does not reset a connection given back (asyncpg's default reset is one more
  round trip, which ustun does not send), so its GET is the ceiling of ustun's GET too.
- `typical_app`: what most teams ship. SQLAlchemy 2's async ORM (mapped `Payment` and `Event`,
  an `AsyncSession` per request, `add`, `commit`, `refresh`) behind the
  `idempotency_header_middleware` package on Redis (not transactional: the record is written
  after the response, apart from the database's transaction), `BENCH_REDIS_PREFIX` before its
  keys. Same tables as the hand-written app.

Bearer keys are looked up by their SHA-256 and cached for 30 s. All read `BENCH_DATABASE`
(a `postgresql://` DSN or an SQLite file path); `prepare_*` create the hand-written apps'
schema and one key.

    uvicorn benchmarks.request_path_apps:asyncpg_app --factory
"""

# No `from __future__ import annotations`: FastAPI must see each route's dependency types, which
# are local to the app factories.
import asyncio
import hashlib
import json
import os
import re
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Annotated, Any

import aiosqlite
import asyncpg
from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from idempotency_header_middleware import IdempotencyHeaderMiddleware
from idempotency_header_middleware.backends import RedisBackend
from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis
from sqlalchemy import BigInteger, DateTime, String, event, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

CACHE_SECONDS = 30.0
READERS = 4  # SQLite reader connections (each is a thread in aiosqlite)
POOL_SIZE = 10  # PostgreSQL connections, as ustun's default pool
RECORD_TTL = timedelta(hours=24)  # how long ustun keeps an idempotency record by default
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

SCHEMA = """
CREATE TABLE accounts (id VARCHAR(40) PRIMARY KEY, name VARCHAR(100) NOT NULL UNIQUE);
CREATE TABLE api_keys (
  key_hash VARCHAR(64) PRIMARY KEY,
  account_id VARCHAR(40) NOT NULL REFERENCES accounts(id)
);
CREATE TABLE payments (
  id VARCHAR(40) PRIMARY KEY,
  account_id VARCHAR(40) NOT NULL REFERENCES accounts(id),
  amount BIGINT NOT NULL,
  currency VARCHAR(3) NOT NULL,
  order_id BIGINT,
  description TEXT,
  status VARCHAR(16) NOT NULL,
  version INTEGER NOT NULL,
  created_at {ts} NOT NULL,
  updated_at {ts} NOT NULL
);
CREATE TABLE outbox_events (
  id VARCHAR(40) PRIMARY KEY,
  account_id VARCHAR(40) NOT NULL REFERENCES accounts(id),
  type VARCHAR(100) NOT NULL,
  data TEXT NOT NULL,
  created_at {ts} NOT NULL
);
CREATE INDEX ix_outbox_events_account_id_id ON outbox_events (account_id, id);
"""
PAYMENT_COLUMNS = (
    "id, account_id, amount, currency, order_id, description, status, version, created_at,"
    " updated_at"
)
# PostgreSQL's placeholders; `_sqlite` turns them into SQLite's (parameters are in order).
INSERT_PAYMENT = (
    f"INSERT INTO payments ({PAYMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
)
INSERT_EVENT = (
    "INSERT INTO outbox_events (id, account_id, type, data, created_at) VALUES ($1, $2, $3, $4, $5)"
)
SELECT_PAYMENT = f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1 AND account_id = $2"
SELECT_KEY = "SELECT account_id FROM api_keys WHERE key_hash = $1"

# The six-statement apps: ustun's statements, as `ustun serve` sends them (PostgreSQL's
# `log_statement = 'all'`), with their named parameters numbered. The key's live record (an outer
# join: always one row) and its scope's bytes of stored answers (`ustun.idempotency.sql`).
_KEY_AND_USAGE = """
    (SELECT CAST(coalesce(sum(u.bytes), 0) AS BIGINT) FROM idempotency_usage AS u
     WHERE u.scope = $1) AS used,
    r.fingerprint, r.state, r.locked_until, r.status, r.headers, r.body
    FROM (SELECT 1) AS one
    LEFT JOIN idempotency_records AS r
      ON r.scope = $1 AND r.key = $2 AND r.expires_at > $3"""
# PostgreSQL: the key's transaction-scoped advisory lock, and the read, in one statement.
LOCK_AND_READ = (
    """SELECT pg_try_advisory_xact_lock(hashtextextended(
             length(CAST($1 AS text)) || ':' || CAST($1 AS text) || CAST($2 AS text), 0
           )) AS locked,"""
    + _KEY_AND_USAGE
)
# SQLite: the read alone, before the transaction.
READ_KEY = "SELECT" + _KEY_AND_USAGE
INSERT_PAYMENT_RETURNING = f"{INSERT_PAYMENT} RETURNING {PAYMENT_COLUMNS}"
# The event, and in the same statement the endpoints that get it (`ustun.webhooks.adapters.plans`):
# each dialect fills in its aggregate, JSON array reader and endpoint parameter.
_INSERT_WEBHOOK_EVENT = """INSERT INTO webhook_events
  (id, account_id, type, data, object_url, created_at, traceparent)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING (SELECT {agg} FROM webhook_endpoints AS ep
  WHERE ep.account_id = $2 AND ep.enabled
    AND (ep.id = {endpoint} OR ({endpoint} IS NULL AND EXISTS ({patterns}
      WHERE {p} = $9 OR {p} = $3
        OR (substr({p}, length({p}) - 1) = '.*'
            AND substr($3, 1, length({p}) - 1) = substr({p}, 1, length({p}) - 1))))))
  AS targets"""
_TARGET = """CASE WHEN ep."filter" IS NULL THEN ep.id ELSE ep.id || ' ' || ep."filter" END"""
INSERT_WEBHOOK_EVENT = {
    "postgresql": _INSERT_WEBHOOK_EVENT.format(
        agg=f"string_agg({_TARGET}, chr(10))",
        endpoint="CAST($8 AS VARCHAR)",
        patterns="SELECT FROM json_array_elements_text(ep.events::json) AS p(pattern)",
        p="p.pattern",
    ),
    "sqlite": _INSERT_WEBHOOK_EVENT.format(
        agg=f"group_concat({_TARGET}, char(10))",
        endpoint="$8",
        patterns="SELECT 1 FROM json_each(ep.events) AS p",
        p="p.value",
    ),
}
# The completed record with its answer, or the takeover of one expired or whose lease ran out.
UPSERT_RECORD = """INSERT INTO idempotency_records (scope, key, fingerprint, state, lease_token,
  locked_until, status, headers, body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint,
  state = excluded.state, lease_token = excluded.lease_token,
  locked_until = excluded.locked_until, status = excluded.status, headers = excluded.headers,
  body = excluded.body, created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE idempotency_records.expires_at <= $12
  OR idempotency_records.state = $13 AND idempotency_records.locked_until <= $12"""


def _sqlite(sql: str) -> str:
    """`sql` with SQLite's numbered `?N` placeholders (a parameter may be used twice)."""
    return re.sub(r"\$(\d+)", r"?\1", sql)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "bench_sk_" + secrets.token_urlsafe(32)


async def prepare_postgresql(dsn: str, key: str) -> None:
    """Create the schema and an account holding `key` in a fresh PostgreSQL database."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SCHEMA.format(ts="TIMESTAMPTZ"))
        await conn.execute("INSERT INTO accounts VALUES ('acct_1', 'bench')")
        await conn.execute("INSERT INTO api_keys VALUES ($1, 'acct_1')", hash_key(key))
    finally:
        await conn.close()


def prepare_sqlite(path: str, key: str) -> None:
    """Create the schema (WAL) and an account holding `key` in a fresh SQLite file."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA.format(ts="TIMESTAMP"))
        conn.execute("INSERT INTO accounts VALUES ('acct_1', 'bench')")
        conn.execute("INSERT INTO api_keys VALUES (?, 'acct_1')", (hash_key(key),))
    conn.close()


class PaymentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount: int = Field(gt=0, le=10**15)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    order_id: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    description: str | None = Field(default=None, max_length=1000)


def _render(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "payment",
        "amount": row["amount"],
        "currency": row["currency"],
        "order_id": row["order_id"],
        "description": row["description"],
        "status": row["status"],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
    }


def _answer(row: Any, status: int = 200, if_none_match: str | None = None) -> Response:
    etag = f'"{row["version"]}"'
    headers = {"etag": etag, "last-modified": format_datetime(row["updated_at"], usegmt=True)}
    if if_none_match is not None and etag in (t.strip() for t in if_none_match.split(",")):
        return Response(status_code=304, headers=headers)
    if status == 201:
        headers["location"] = f"/v1/payments/{row['id']}"
    body = json.dumps(_render(row), separators=(",", ":")).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def _healthz() -> dict[str, str]:
    return {"status": "ok"}


def _authenticator(
    lookup: Callable[[str], Awaitable[str | None]],
) -> Callable[[str | None], Awaitable[str]]:
    """An async dependency: the account id of the bearer key, cached for CACHE_SECONDS."""
    cache: dict[str, tuple[str, float]] = {}

    async def account(authorization: Annotated[str | None, Header()] = None) -> str:
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key:
            raise HTTPException(401, headers={"www-authenticate": "Bearer"})
        digest = hash_key(key)
        now = time.monotonic()
        hit = cache.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        found = await lookup(digest)
        if found is None:
            raise HTTPException(401, headers={"www-authenticate": "Bearer"})
        cache[digest] = (found, now + CACHE_SECONDS)
        return found

    return account


def _payment(body: PaymentCreate, account_id: str) -> dict[str, Any]:
    """The new payment's row, in `PAYMENT_COLUMNS` order."""
    now = datetime.now(UTC)
    return {
        "id": "pay_" + secrets.token_hex(10),
        "account_id": account_id,
        **body.model_dump(),
        "status": "pending",
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }


def _event(payment: dict[str, Any]) -> tuple[Any, ...]:
    """The outbox row announcing `payment`."""
    data = json.dumps(_render(payment), separators=(",", ":"))
    return (
        "evt_" + secrets.token_hex(10),
        payment["account_id"],
        "payment.created",
        data,
        payment["created_at"],
    )


EVENT_COLUMNS = ("id", "account_id", "type", "data", "created_at")  # `_event`'s


def _webhook_event(payment: dict[str, Any]) -> tuple[Any, ...]:
    """`INSERT_WEBHOOK_EVENT`'s parameters: `_event`'s row with its object's URL and no trace
    context, then no endpoint (every one whose patterns select it) and the wildcard `*`."""
    event_id, account_id, event_type, data, created_at = _event(payment)
    url = f"/v1/payments/{payment['id']}"
    return (event_id, account_id, event_type, data, url, created_at, None, None, "*")


def _record(
    scope: str, key: str, body: PaymentCreate, answer: Response, now: datetime
) -> tuple[Any, ...]:
    """`UPSERT_RECORD`'s parameters: `key` completed with `answer` (status, headers, body)."""
    headers = [[name, value] for name, value in answer.headers.items() if name != "content-length"]
    fingerprint = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    return (
        *(scope, key, fingerprint, "completed", secrets.token_hex(16), now),
        *(answer.status_code, json.dumps(headers), bytes(answer.body), now, now + RECORD_TTL),
        *(now, "in_progress"),
    )


def _replay(found: Any) -> Response:
    """The answer to a key already used: its stored response, or 409 while it is in progress."""
    if found["status"] is None:
        raise HTTPException(409)
    headers = dict(json.loads(found["headers"]))
    return Response(bytes(found["body"]), status_code=found["status"], headers=headers)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The six-statement app's reset of a connection given back to the pool: none. It leaves no
    session state (its advisory locks are the transaction's), and asyncpg's default (`SELECT
    pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;`) is a round trip per request
    that ustun (SQLAlchemy's pool) does not send. The hand-written app keeps the default, as a
    careful engineer's app would."""


def asyncpg_app() -> FastAPI:
    """FastAPI + asyncpg."""
    return _asyncpg_app(six_statements=False)


def asyncpg_six_app() -> FastAPI:
    """FastAPI + asyncpg, whose POST sends ustun's statements to ustun's tables."""
    return _asyncpg_app(six_statements=True)


def _asyncpg_app(*, six_statements: bool) -> FastAPI:
    dsn = os.environ["BENCH_DATABASE"]
    pool: asyncpg.Pool | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal pool
        pool = await asyncpg.create_pool(
            dsn,
            min_size=POOL_SIZE,
            max_size=POOL_SIZE,
            reset=_keep_session if six_statements else None,
        )
        yield
        await pool.close()

    async def lookup(digest: str) -> str | None:
        assert pool is not None
        found: str | None = await pool.fetchval(SELECT_KEY, digest)
        return found

    Account = Annotated[str, Depends(_authenticator(lookup))]
    app = FastAPI(lifespan=lifespan)
    app.get("/healthz")(_healthz)

    async def create(body: PaymentCreate, account: Account) -> Response:
        assert pool is not None
        payment = _payment(body, account)
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(INSERT_PAYMENT, *payment.values())
            await conn.execute(INSERT_EVENT, *_event(payment))
        return _answer(payment, 201)

    async def create_six(
        body: PaymentCreate, account: Account, idempotency_key: Annotated[str, Header()]
    ) -> Response:
        assert pool is not None
        payment = _payment(body, account)
        now = payment["created_at"]
        async with pool.acquire() as conn, conn.transaction():
            found = await conn.fetchrow(LOCK_AND_READ, account, idempotency_key, now)
            if not found["locked"] or found["state"] is not None:
                return _replay(found)
            await conn.fetchrow(INSERT_PAYMENT_RETURNING, *payment.values())
            await conn.fetchval(INSERT_WEBHOOK_EVENT["postgresql"], *_webhook_event(payment))
            answer = _answer(payment, 201)
            record = _record(account, idempotency_key, body, answer, now)
            if await conn.execute(UPSERT_RECORD, *record) != "INSERT 0 1":
                raise HTTPException(409)  # taken meanwhile: roll back
        return answer

    app.post("/v1/payments", status_code=201)(create_six if six_statements else create)

    @app.get("/v1/payments/{payment_id}")
    async def read(payment_id: str, account: Account, request: Request) -> Response:
        assert pool is not None
        row = await pool.fetchrow(SELECT_PAYMENT, payment_id, account)
        if row is None:
            raise HTTPException(404)
        return _answer(row, if_none_match=request.headers.get("if-none-match"))

    return app


def aiosqlite_app() -> FastAPI:
    """FastAPI + aiosqlite: WAL, one writer (`BEGIN IMMEDIATE`), a few readers."""
    return _aiosqlite_app(six_statements=False)


def aiosqlite_six_app() -> FastAPI:
    """FastAPI + aiosqlite, whose POST sends ustun's statements to ustun's tables."""
    return _aiosqlite_app(six_statements=True)


def _aiosqlite_app(*, six_statements: bool) -> FastAPI:
    path = os.environ["BENCH_DATABASE"]
    write_lock = asyncio.Lock()
    writer: aiosqlite.Connection | None = None
    readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
    insert_payment, insert_event = _sqlite(INSERT_PAYMENT), _sqlite(INSERT_EVENT)
    select_payment, select_key = _sqlite(SELECT_PAYMENT), _sqlite(SELECT_KEY)
    read_key, upsert_record = _sqlite(READ_KEY), _sqlite(UPSERT_RECORD)
    insert_returning = _sqlite(INSERT_PAYMENT_RETURNING)
    insert_webhook_event = _sqlite(INSERT_WEBHOOK_EVENT["sqlite"])

    async def connect() -> aiosqlite.Connection:
        conn = await aiosqlite.connect(path, isolation_level=None, timeout=30)
        conn.row_factory = aiosqlite.Row
        await conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal writer
        writer = await connect()
        for _ in range(READERS):
            readers.put_nowait(await connect())
        yield
        await writer.close()
        while not readers.empty():
            await readers.get_nowait().close()

    @asynccontextmanager
    async def reader() -> AsyncIterator[aiosqlite.Connection]:
        conn = await readers.get()
        try:
            yield conn
        finally:
            readers.put_nowait(conn)

    @asynccontextmanager
    async def transaction() -> AsyncIterator[aiosqlite.Connection]:
        """The writer in a `BEGIN IMMEDIATE` transaction, committed (rolled back on an error)."""
        assert writer is not None
        async with write_lock:
            await writer.execute("BEGIN IMMEDIATE")
            try:
                yield writer
            except BaseException:
                await writer.execute("ROLLBACK")
                raise
            await writer.execute("COMMIT")

    async def lookup(digest: str) -> str | None:
        async with reader() as conn, conn.execute(select_key, (digest,)) as cursor:
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    Account = Annotated[str, Depends(_authenticator(lookup))]
    app = FastAPI(lifespan=lifespan)
    app.get("/healthz")(_healthz)

    async def create(body: PaymentCreate, account: Account) -> Response:
        payment = _payment(body, account)
        async with transaction() as conn:
            await conn.execute(insert_payment, tuple(payment.values()))
            await conn.execute(insert_event, _event(payment))
        return _answer(payment, 201)

    async def create_six(
        body: PaymentCreate, account: Account, idempotency_key: Annotated[str, Header()]
    ) -> Response:
        payment = _payment(body, account)
        now = payment["created_at"]
        async with reader() as conn:
            [found] = await conn.execute_fetchall(read_key, (account, idempotency_key, now))
        if found["state"] is not None:
            return _replay(found)
        answer = _answer(payment, 201)
        async with transaction() as conn:
            await conn.execute_fetchall(insert_returning, tuple(payment.values()))
            await conn.execute_fetchall(insert_webhook_event, _webhook_event(payment))
            record = _record(account, idempotency_key, body, answer, now)
            if (await conn.execute(upsert_record, record)).rowcount != 1:
                raise HTTPException(409)  # a duplicate settled first: roll back
        return answer

    app.post("/v1/payments", status_code=201)(create_six if six_statements else create)

    @app.get("/v1/payments/{payment_id}")
    async def read(payment_id: str, account: Account, request: Request) -> Response:
        async with reader() as conn:
            cursor = await conn.execute(select_payment, (payment_id, account))
            row = await cursor.fetchone()
            await cursor.close()
        if row is None:
            raise HTTPException(404)
        return _answer(_utc(dict(row)), if_none_match=request.headers.get("if-none-match"))

    return app


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its timestamps as UTC datetimes (SQLite keeps them as text, or naive)."""
    for column in ("created_at", "updated_at"):
        value = row[column]
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        row[column] = value.replace(tzinfo=UTC)
    return row


# The typical stack's ORM: the hand-written apps' tables, mapped.
class Base(DeclarativeBase):
    pass


class ApiKey(Base):
    __tablename__ = "api_keys"

    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(40))


class Payment(Base):
    __tablename__ = "payments"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(40))
    amount: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    order_id: Mapped[int | None] = mapped_column(BigInteger)
    description: Mapped[str | None]
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Event(Base):
    __tablename__ = "outbox_events"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(40))
    type: Mapped[str] = mapped_column(String(100))
    data: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def _columns(payment: Payment) -> dict[str, Any]:
    """The payment's row, for `_answer`."""
    return _utc({column: getattr(payment, column) for column in PAYMENT_COLUMNS.split(", ")})


def typical_app() -> FastAPI:
    """FastAPI + SQLAlchemy's async ORM, behind an idempotency middleware on Redis."""
    database = os.environ["BENCH_DATABASE"]
    if database.startswith("postgresql://"):
        url = database.replace("postgresql://", "postgresql+asyncpg://", 1)
        engine = create_async_engine(url, pool_size=POOL_SIZE, max_overflow=0)
    else:
        engine = create_async_engine(
            f"sqlite+aiosqlite:///{database}", connect_args={"timeout": 30}
        )

        @event.listens_for(engine.sync_engine, "connect")
        def synchronous_normal(conn: Any, record: Any) -> None:
            conn.execute("PRAGMA synchronous=NORMAL")  # as the other apps: WAL, no fsync a commit

    sessions = async_sessionmaker(engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.dispose()

    async def session() -> AsyncIterator[AsyncSession]:
        async with sessions() as opened:
            yield opened

    async def lookup(digest: str) -> str | None:
        async with sessions() as opened:
            found = await opened.scalar(select(ApiKey.account_id).where(ApiKey.key_hash == digest))
        return found

    Account = Annotated[str, Depends(_authenticator(lookup))]
    Session = Annotated[AsyncSession, Depends(session)]
    prefix = os.environ["BENCH_REDIS_PREFIX"]
    backend = RedisBackend(
        Redis.from_url(REDIS_URL), keys_key=f"{prefix}keys", response_key=f"{prefix}responses:"
    )
    app = FastAPI(lifespan=lifespan)
    # The package types its __call__ as returning a response, not None as ASGI's.
    app.add_middleware(IdempotencyHeaderMiddleware, backend=backend)  # type: ignore[arg-type]
    app.get("/healthz")(_healthz)

    @app.post("/v1/payments", status_code=201)
    async def create(body: PaymentCreate, account: Account, db: Session) -> Response:
        row = _payment(body, account)
        payment = Payment(**row)
        db.add_all([payment, Event(**dict(zip(EVENT_COLUMNS, _event(row), strict=True)))])
        await db.commit()
        await db.refresh(payment)
        return _answer(_columns(payment), 201)

    @app.get("/v1/payments/{payment_id}")
    async def read(payment_id: str, account: Account, db: Session, request: Request) -> Response:
        payment = await db.scalar(
            select(Payment).where(Payment.id == payment_id, Payment.account_id == account)
        )
        if payment is None:
            raise HTTPException(404)
        return _answer(_columns(payment), if_none_match=request.headers.get("if-none-match"))

    return app
