"""The pending-jobs quota on SQLite and PostgreSQL: `enqueue(max_pending=...)` refuses a job
past it with 429 `quota-exceeded`, counted atomically per account."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from job_kinds import count_pending
from ustun import jobs
from ustun.errors import ProblemError
from ustun.jobs.adapters import store_for
from ustun.jobs.queue import PENDING_RETRY_AFTER
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database


async def _account(db: Database) -> str:
    account = await account_for_key(db, await create_key(db, f"quota-{uuid.uuid4().hex[:12]}"))
    assert account is not None
    return account.id


def _kind() -> str:
    """A kind no other test enqueues, so claims here see only this test's jobs."""
    return f"test-{uuid.uuid4().hex[:10]}"


async def test_a_job_past_the_quota_is_refused_until_one_leaves_pending(db: Database) -> None:
    a, b = await _account(db), await _account(db)
    kind = _kind()
    for _ in range(3):
        await jobs.enqueue(db, kind, account_id=a, max_pending=3)
    with pytest.raises(ProblemError) as refused:
        await jobs.enqueue(db, kind, account_id=a, max_pending=3)
    assert refused.value.slug == "quota-exceeded"
    assert refused.value.headers == {"retry-after": str(PENDING_RETRY_AFTER)}
    assert refused.value.extensions == {"limit": 3}
    await jobs.enqueue(db, kind, account_id=b, max_pending=3)  # another account's own quota
    await jobs.enqueue(db, kind, account_id=a)  # no quota asked for
    [claimed] = await store_for(db).claim(db, worker_id="wrk_q", kinds=[kind], limit=1, lease=30)
    assert claimed.account_id == a  # its oldest is processing: no longer pending
    await jobs.enqueue(db, kind, account_id=a, max_pending=4)


async def test_jobs_enqueued_earlier_in_the_unit_of_work_count(db: Database) -> None:
    a = await _account(db)
    kind = _kind()
    with pytest.raises(ProblemError):
        async with db.unit_of_work():
            for _ in range(3):
                await jobs.enqueue(db, kind, account_id=a, max_pending=2)
    assert await count_pending(db, a, at_most=10) == 0  # all rolled back
    async with db.unit_of_work():
        for _ in range(2):
            await jobs.enqueue(db, kind, account_id=a, max_pending=2)
    assert await count_pending(db, a, at_most=10) == 2


async def test_concurrent_enqueues_never_exceed_the_quota(db: Database) -> None:
    a = await _account(db)
    kind, quota, tries = _kind(), 5, 40

    async def enqueue() -> bool:
        try:
            await jobs.enqueue(db, kind, account_id=a, max_pending=quota)
        except ProblemError:
            return False
        return True

    accepted = await asyncio.gather(*(enqueue() for _ in range(tries)))
    assert sum(accepted) == quota
    assert await count_pending(db, a, at_most=tries) == quota
