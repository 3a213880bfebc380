"""`POST /v1/reports` past the account's pending-jobs quota (USTUN_MAX_PENDING_JOBS) is 429
`quota-exceeded` with `Retry-After`; other accounts and a retry once there is room are not."""

from __future__ import annotations

import httpx
import pytest

from ustun.jobs.queue import PENDING_RETRY_AFTER
from ustun.settings import Settings

QUOTA = 3
REPORT = {"period": "2026", "format": "csv"}


@pytest.fixture
def settings(database_url: str) -> Settings:
    """A small quota, as if USTUN_MAX_PENDING_JOBS=3."""
    return Settings(database_url=database_url, max_pending_jobs=QUOTA)


async def test_a_report_past_the_pending_jobs_quota_is_429_until_one_leaves(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    accepted = [await client.post("/v1/reports", json=REPORT) for _ in range(QUOTA)]
    assert [r.status_code for r in accepted] == [202] * QUOTA

    refused = await client.post("/v1/reports", json=REPORT, headers={"idempotency-key": "r-1"})
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == str(PENDING_RETRY_AFTER)
    problem = refused.json()
    assert problem["type"].endswith("/problems/quota-exceeded")
    assert problem["limit"] == QUOTA
    listed = await client.get("/v1/jobs", params={"status": "pending"})
    assert len(listed.json()["data"]) == QUOTA  # nothing was enqueued

    assert (await other_client.post("/v1/reports", json=REPORT)).status_code == 202

    cancelled = await client.post(f"/v1/jobs/{accepted[0].json()['id']}/cancel")
    assert cancelled.status_code == 200
    # The same key again: the refusal was not stored as its answer.
    retried = await client.post("/v1/reports", json=REPORT, headers={"idempotency-key": "r-1"})
    assert retried.status_code == 202
