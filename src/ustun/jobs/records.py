"""Value types of the jobs pillar: a job as read from its row, and a job's stored result.

Every new version of a job row after the first gets its `job_events` row from a database
trigger (migration 0005); the first (creation) is read from the job row itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row


@dataclass(frozen=True, slots=True)
class Job:
    """One job row."""

    id: str
    account_id: str | None
    kind: str
    status: str
    payload: dict[str, Any]
    progress: int
    attempts: int
    max_attempts: int
    run_at: datetime
    locked_by: str | None
    lease_until: datetime | None
    cancel_requested: bool
    error: dict[str, Any] | None
    has_result: bool
    version: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    # The trace its runs join (`ustun.tracing`): None with tracing off.
    traceparent: str | None = None

    @classmethod
    def from_row(cls, row: Row[Any]) -> Job:
        """Build from a row of the `jobs` table."""
        return cls(**row._mapping)


@dataclass(frozen=True, slots=True)
class Result:
    """What a job produced: stored with its final state and served at the job's `result_url`."""

    content: bytes
    media_type: str
    filename: str


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A change of a job: its new `version` (the SSE event id), status and progress."""

    job_id: str
    version: int
    type: str
    status: str
    progress: int
    created_at: datetime

    @classmethod
    def created(cls, job: Job) -> JobEvent:
        """The first event of every job: it was created, pending."""
        return cls(job.id, 1, "status", "pending", 0, job.created_at)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of an account's jobs, newest first; `next_cursor` names the last when more
    follow (ids are time-ordered, so paging on `id < cursor` is stable while jobs arrive)."""

    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Backlog:
    """The pending jobs whose run time has come: how many, and the oldest one's run time."""

    depth: int
    oldest_due: datetime | None
