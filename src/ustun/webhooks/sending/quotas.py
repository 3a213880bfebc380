"""Per-account quotas: how many endpoints an account may have, how often it may send a `ping`.

Both are counted in the database inside the writing transaction, after locking the account's
row, so they hold under concurrent requests and across every process sharing the database.
"""

from __future__ import annotations

from datetime import timedelta

from ustun import clock
from ustun.errors import ProblemError
from ustun.http.retry_after import format_retry_after
from ustun.store import UnitOfWork
from ustun.webhooks.adapters import for_connection
from ustun.webhooks.sending.outbox import PING

PING_WINDOW = timedelta(minutes=1)
# A full endpoint cap frees only when an endpoint is deleted: a retry is not worth it sooner.
CAP_RETRY_AFTER = 3600


async def reserve_endpoint(uow: UnitOfWork, account_id: str, cap: int) -> None:
    """Raise 429 `quota-exceeded` unless the account has room for one more endpoint."""
    check_endpoint_room(await for_connection(uow.conn).endpoints_held(uow, account_id), cap)


def check_endpoint_room(count: int, cap: int) -> None:
    """Raise 429 `quota-exceeded` if an account with `count` endpoints (counted under its lock:
    `webhooks.adapters.plans.endpoints_held`) may have no more than that under `cap`."""
    if count >= cap:
        raise ProblemError(
            "quota-exceeded",
            f"This account has {count} webhook endpoints, the most it may have ({cap}). "
            "Delete one you no longer use to add another.",
            headers={"retry-after": format_retry_after(CAP_RETRY_AFTER)},
            limit=cap,
        )


async def reserve_ping(uow: UnitOfWork, account_id: str, per_minute: int) -> None:
    """Raise 429 `rate-limited` if the account sent `per_minute` pings in the last minute."""
    store = for_connection(uow.conn)
    await store.lock_account(uow, account_id)
    now = clock.now()  # Once the lock is held: the pings counted are all older than this.
    count, oldest = await store.count_events(uow, account_id, PING, now - PING_WINDOW)
    if oldest is not None and count >= per_minute:
        wait = (oldest + PING_WINDOW - now).total_seconds()
        raise ProblemError(
            "rate-limited",
            f"This account may send {per_minute} test pings a minute. "
            "Retry after the number of seconds in Retry-After.",
            headers={"retry-after": format_retry_after(max(1.0, wait))},
            limit=per_minute,
        )
