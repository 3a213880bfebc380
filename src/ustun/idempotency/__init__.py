"""Idempotency keys: a retried request never causes a second effect.

`IdempotencyMiddleware` (pure ASGI) with a `RecordStore`: `SqlRecordStore` (SQLite/PostgreSQL,
transactional with the handler's writes: a `TransactionalRecordStore`) or `RedisRecordStore`
(`pip install 'ustun[redis]'`, imported on first use). What to do with a request is decided
without I/O by `ustun.idempotency.decision`, which every framework's middleware shares. Mark
routes with
`openapi_extra=idempotency("required" | "optional" | "off")`. A `Sealer` keeps the stored body
of a `Cache-Control: no-store` response encrypted.
"""

from typing import TYPE_CHECKING, Any

from ustun.errors import LeaseLost
from ustun.idempotency.middleware import IdempotencyMiddleware, account_scope
from ustun.idempotency.policy import Policy, idempotency
from ustun.idempotency.records import (
    Claim,
    Claimed,
    Found,
    Lookup,
    OverQuota,
    Record,
    State,
    StoredResponse,
)
from ustun.idempotency.sealing import Sealer
from ustun.idempotency.sql import SqlRecordStore
from ustun.idempotency.store import RecordStore, TransactionalRecordStore
from ustun.idempotency.sweeper import sweeper

if TYPE_CHECKING:
    from ustun.idempotency.redis_store import RedisRecordStore

__all__ = [
    "Claim",
    "Claimed",
    "Found",
    "IdempotencyMiddleware",
    "LeaseLost",
    "Lookup",
    "OverQuota",
    "Policy",
    "Record",
    "RecordStore",
    "RedisRecordStore",
    "Sealer",
    "SqlRecordStore",
    "State",
    "StoredResponse",
    "TransactionalRecordStore",
    "account_scope",
    "idempotency",
    "sweeper",
]


def __getattr__(name: str) -> Any:
    """`RedisRecordStore` on first use, so that the SQL store alone needs no redis package."""
    if name == "RedisRecordStore":
        from ustun.idempotency.redis_store import RedisRecordStore

        return RedisRecordStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
