"""A saturated endpoint's backlog, written straight in SQL (200,000 rows in seconds, not through
the API), for `webhooks_scale.py` and `claim_explain.py`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.webhooks import endpoints as ops
from ustun.webhooks.secretbox import SecretBox

SECRET_KEY = "benchmark-secret-key-0123456789abcdef"

# N events, and one due delivery of each to one endpoint, due an hour ago one millisecond apart:
# at the head of the due order, where a claim for any other endpoint starts reading.
_EVENTS = """
INSERT INTO webhook_events (id, account_id, type, data, object_url, created_at)
SELECT $2 || lpad(n::text, 7, '0'), $1, 'payment.created', '{"id":"pay_backlog"}', NULL,
    now() - interval '1 hour'
FROM generate_series(1, $3::int) AS n
"""
_DELIVERIES = """
INSERT INTO webhook_deliveries (id, account_id, endpoint_id, event_id, status, attempt_count,
    next_attempt_at, lease_token, created_at, updated_at)
SELECT $3 || 'd' || lpad(n::text, 7, '0'), $1, $2, $3 || lpad(n::text, 7, '0'), 'pending', 0,
    now() - interval '1 hour' + n * interval '1 millisecond', NULL,
    now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, $4::int) AS n
"""


async def insert_backlog(
    conn: asyncpg.Connection, account_id: str, endpoint_id: str, rows: int, prefix: str = "evt_bl"
) -> None:
    """`rows` due deliveries of `endpoint_id` (and their events), then ANALYZE, as autovacuum
    would do after such a load."""
    async with conn.transaction():
        await conn.execute(_EVENTS, account_id, prefix, rows)
        await conn.execute(_DELIVERIES, account_id, endpoint_id, prefix, rows)
    await conn.execute("ANALYZE webhook_events; ANALYZE webhook_deliveries")


async def new_account(db: Database) -> str:
    """Migrate the database and return a new account's id."""
    await upgrade(db)
    account = await account_for_key(db, await create_key(db, f"bench-{uuid.uuid4().hex[:8]}"))
    assert account is not None
    return account.id


async def add_endpoints(
    db: Database, account_id: str, urls: Sequence[str], *, max_in_flight: int = 8
) -> list[str]:
    """One endpoint for every event at each of `urls`; their ids."""
    async with db.unit_of_work() as uow:
        return [
            (
                await ops.create(
                    uow,
                    SecretBox(SECRET_KEY),
                    account_id,
                    url=url,
                    events=["*"],
                    max_in_flight=max_in_flight,
                )
            )[0]
            for url in urls
        ]
