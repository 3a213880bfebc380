"""Idempotency keys: a retried request never causes a second effect.

`IdempotencyMiddleware` (pure ASGI) with a `RecordStore`: `SqlRecordStore` (SQLite/PostgreSQL,
transactional with the handler's writes) or `RedisRecordStore`. Mark routes with
`openapi_extra=idempotency("required" | "optional" | "off")`. A `Sealer` keeps the stored body
of a `Cache-Control: no-store` response encrypted.
"""

from ustun.http.errors import LeaseLost
from ustun.idempotency.middleware import IdempotencyMiddleware, account_scope
from ustun.idempotency.policy import Policy, idempotency
from ustun.idempotency.records import Claim, Claimed, Found, Record, State, StoredResponse
from ustun.idempotency.redis_store import RedisRecordStore
from ustun.idempotency.sealing import Sealer
from ustun.idempotency.sql import SqlRecordStore
from ustun.idempotency.store import RecordStore
from ustun.idempotency.sweeper import sweeper

__all__ = [
    "Claim",
    "Claimed",
    "Found",
    "IdempotencyMiddleware",
    "LeaseLost",
    "Policy",
    "Record",
    "RecordStore",
    "RedisRecordStore",
    "Sealer",
    "SqlRecordStore",
    "State",
    "StoredResponse",
    "account_scope",
    "idempotency",
    "sweeper",
]
