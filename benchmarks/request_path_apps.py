"""The hand-written peers of `benchmarks/request_path.py`: what a careful engineer writes by hand.

Two small FastAPI apps, no ustun import, doing exactly the durable work of ustun's
`POST /v1/payments` (authenticated; insert the payment and its outbox event in one
transaction; 201 with Location and ETag) and `GET /v1/payments/{id}` (authenticated read of one
row; 200 with ETag and Last-Modified, 304 on a matching If-None-Match). No idempotency records.

- `asyncpg_app`: one asyncpg pool, statements prepared by asyncpg's statement cache.
- `aiosqlite_app`: WAL, one writer connection behind an asyncio lock with `BEGIN IMMEDIATE`,
  and a few reader connections.

Bearer keys are looked up by their SHA-256 and cached for 30 s. Both read `BENCH_DATABASE`
(a `postgresql://` DSN or an SQLite file path); `prepare_*` create the schema and one key.

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
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Annotated, Any

import aiosqlite
import asyncpg
from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, Field

CACHE_SECONDS = 30.0
READERS = 4  # SQLite reader connections (each is a thread in aiosqlite)
POOL_SIZE = 10  # PostgreSQL connections, as ustun's default pool

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


def _sqlite(sql: str) -> str:
    """`sql` with SQLite's `?` placeholders."""
    return re.sub(r"\$\d+", "?", sql)


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


def asyncpg_app() -> FastAPI:
    """FastAPI + asyncpg."""
    dsn = os.environ["BENCH_DATABASE"]
    pool: asyncpg.Pool | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal pool
        pool = await asyncpg.create_pool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE)
        yield
        await pool.close()

    async def lookup(digest: str) -> str | None:
        assert pool is not None
        found: str | None = await pool.fetchval(SELECT_KEY, digest)
        return found

    Account = Annotated[str, Depends(_authenticator(lookup))]
    app = FastAPI(lifespan=lifespan)
    app.get("/healthz")(_healthz)

    @app.post("/v1/payments", status_code=201)
    async def create(body: PaymentCreate, account: Account) -> Response:
        assert pool is not None
        payment = _payment(body, account)
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(INSERT_PAYMENT, *payment.values())
            await conn.execute(INSERT_EVENT, *_event(payment))
        return _answer(payment, 201)

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
    path = os.environ["BENCH_DATABASE"]
    write_lock = asyncio.Lock()
    writer: aiosqlite.Connection | None = None
    readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()

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

    async def lookup(digest: str) -> str | None:
        async with reader() as conn, conn.execute(_sqlite(SELECT_KEY), (digest,)) as cursor:
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    Account = Annotated[str, Depends(_authenticator(lookup))]
    app = FastAPI(lifespan=lifespan)
    app.get("/healthz")(_healthz)

    @app.post("/v1/payments", status_code=201)
    async def create(body: PaymentCreate, account: Account) -> Response:
        assert writer is not None
        payment = _payment(body, account)
        async with write_lock:
            await writer.execute("BEGIN IMMEDIATE")
            try:
                await writer.execute(_sqlite(INSERT_PAYMENT), tuple(payment.values()))
                await writer.execute(_sqlite(INSERT_EVENT), _event(payment))
            except BaseException:
                await writer.execute("ROLLBACK")
                raise
            await writer.execute("COMMIT")
        return _answer(payment, 201)

    @app.get("/v1/payments/{payment_id}")
    async def read(payment_id: str, account: Account, request: Request) -> Response:
        async with reader() as conn:
            cursor = await conn.execute(_sqlite(SELECT_PAYMENT), (payment_id, account))
            row = await cursor.fetchone()
            await cursor.close()
        if row is None:
            raise HTTPException(404)
        found = dict(row)
        for column in ("created_at", "updated_at"):
            found[column] = datetime.fromisoformat(found[column]).replace(tzinfo=UTC)
        return _answer(found, if_none_match=request.headers.get("if-none-match"))

    return app
