"""The jobs store on SQLite: every statement through SQLAlchemy, in `BEGIN IMMEDIATE` units of
work, which already serialise a claim's pick and update against every other writer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Update, bindparam, insert, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.jobs.adapters.sql import (
    SqlJobStore,
    claim_statement,
    progress_statement,
    renew_statement,
    settle_done_statement,
)
from ustun.jobs.records import Job
from ustun.jobs.store import JobListener
from ustun.jobs.tables import jobs
from ustun.store import Database

_INSERT = insert(jobs)


class _Hot:
    """A statement built once and run through SQLAlchemy in a unit of work."""

    def __init__(self, statement: Update) -> None:
        self._statement = statement

    async def rows(self, conn: AsyncConnection, params: dict[str, Any]) -> list[Any]:
        """Run with `params` on `conn`; the returned rows as mappings."""
        return list((await conn.execute(self._statement, params)).mappings())

    async def rows_alone(self, db: Database, params: dict[str, Any]) -> list[Any]:
        """`rows` in the unit of work open in this context, or one of its own."""
        async with db.unit_of_work() as uow:
            return await self.rows(uow.conn, params)


# A list parameter is an expanding IN; the held triples of a settle a tuple IN.
_CLAIM = _Hot(
    claim_statement(lambda kind: kind.in_(bindparam("kinds", expanding=True)), lateral=False)
)
_RENEW = _Hot(renew_statement(jobs.c.id.in_(bindparam("job_ids", expanding=True))))
_PROGRESS = _Hot(progress_statement())
_SETTLE_DONE = _Hot(
    settle_done_statement(
        tuple_(jobs.c.id, jobs.c.attempts, jobs.c.locked_by).in_(bindparam("held", expanding=True))
    )
)


class SqliteJobStore(SqlJobStore):
    """`JobStore` for SQLite."""

    def __init__(self, db: Database) -> None:
        super().__init__(
            db, claim=_CLAIM, renew=_RENEW, progress=_PROGRESS, settle_done=_SETTLE_DONE
        )

    async def _write_new(self, conn: AsyncConnection, new: list[Job], alone: bool) -> None:
        await conn.execute(_INSERT, [_values(job) for job in new])

    def _held_params(self, held: Sequence[Job]) -> dict[str, Any]:
        return {"held": [(job.id, job.attempts, job.locked_by) for job in held]}

    async def _lock_queue(self, conn: AsyncConnection, queue: str) -> None:
        """Nothing: the unit of work's `BEGIN IMMEDIATE` already excludes every other writer."""

    def listener(self, wake: asyncio.Event) -> JobListener | None:
        """None: SQLite cannot notify, so other processes' enqueues are found by polling."""
        return None


def _values(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in Job.__slots__}
