"""Value types of the jobs pillar: a job as read from its row, and a job's stored result."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.jobs.tables import job_events


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


async def record_events(conn: AsyncConnection, changed: Iterable[Job], type_: str) -> None:
    """Append one event per changed job (its new version is the event id, for SSE)."""
    rows = [
        {
            "job_id": job.id,
            "version": job.version,
            "type": type_,
            "status": job.status,
            "progress": job.progress,
            "created_at": job.updated_at,
        }
        for job in changed
    ]
    if rows:
        await conn.execute(insert(job_events), rows)
