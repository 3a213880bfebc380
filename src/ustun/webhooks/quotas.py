"""Per-account quotas: how many endpoints an account may have, how often it may send a `ping`.

Both are counted in the database inside the writing transaction, after locking the account's
row, so they hold under concurrent requests and across every process sharing the database.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock
from ustun.http.errors import ProblemError
from ustun.http.retry_after import format_retry_after
from ustun.store.tables import accounts
from ustun.webhooks.outbox import PING
from ustun.webhooks.tables import endpoints, events

PING_WINDOW = timedelta(minutes=1)
# A full endpoint cap frees only when an endpoint is deleted: a retry is not worth it sooner.
CAP_RETRY_AFTER = 3600


async def lock_account(conn: AsyncConnection, account_id: str) -> None:
    """Serialise this account's quota checks until commit.

    PostgreSQL: `FOR NO KEY UPDATE` on its row (inserts referencing it are not blocked);
    SQLite: a no-op, as `BEGIN IMMEDIATE` already serialises every writer.
    """
    await conn.execute(
        select(accounts.c.id).where(accounts.c.id == account_id).with_for_update(key_share=True)
    )


async def reserve_endpoint(conn: AsyncConnection, account_id: str, cap: int) -> None:
    """Raise 429 `quota-exceeded` unless the account has room for one more endpoint."""
    await lock_account(conn, account_id)
    count = await conn.scalar(
        select(func.count()).select_from(endpoints).where(endpoints.c.account_id == account_id)
    )
    if (count or 0) >= cap:
        raise ProblemError(
            "quota-exceeded",
            f"This account has {count} webhook endpoints, the most it may have ({cap}). "
            "Delete one you no longer use to add another.",
            headers={"retry-after": format_retry_after(CAP_RETRY_AFTER)},
            limit=cap,
        )


async def reserve_ping(conn: AsyncConnection, account_id: str, per_minute: int) -> None:
    """Raise 429 `rate-limited` if the account sent `per_minute` pings in the last minute."""
    await lock_account(conn, account_id)
    now = clock.now()  # Once the lock is held: the pings counted are all older than this.
    count, oldest = (
        await conn.execute(
            select(func.count(), func.min(events.c.created_at)).where(
                events.c.account_id == account_id,
                events.c.type == PING,
                events.c.created_at > now - PING_WINDOW,
            )
        )
    ).one()
    if count >= per_minute:
        wait = (oldest + PING_WINDOW - now).total_seconds()
        raise ProblemError(
            "rate-limited",
            f"This account may send {per_minute} test pings a minute. "
            "Retry after the number of seconds in Retry-After.",
            headers={"retry-after": format_retry_after(max(1.0, wait))},
            limit=per_minute,
        )
