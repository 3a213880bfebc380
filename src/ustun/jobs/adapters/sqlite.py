"""The jobs store on SQLite: its hot statements in `BEGIN IMMEDIATE` units of work, which
already serialise a claim's pick and update against every other writer. A list parameter is
JSON text read by `json_each`, so a statement's SQL never changes with its list's length."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sqlalchemy import JSON, ColumnClause, ColumnElement, bindparam, column, func, select, tuple_

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
from ustun.store.statements import Statement


def _each(name: str) -> Any:
    """The elements of the JSON array parameter `name`, as a table of one `value` column."""
    return select(column("value")).select_from(func.json_each(bindparam(name, type_=JSON())))


def _held() -> ColumnElement[bool]:
    """The job is one of the held `[id, attempts, locked_by]` triples of the parameter `held`."""
    value: ColumnClause[Any] = column("value")
    triples = select(*(func.json_extract(value, f"$[{i}]") for i in range(3))).select_from(
        func.json_each(bindparam("held", type_=JSON()))
    )
    return tuple_(jobs.c.id, jobs.c.attempts, jobs.c.locked_by).in_(triples)


CLAIM = Statement(claim_statement(lambda kind: kind.in_(_each("kinds")), lateral=False))
_RENEW = Statement(renew_statement(jobs.c.id.in_(_each("job_ids"))))
_PROGRESS = Statement(progress_statement())
_SETTLE_DONE = Statement(settle_done_statement(_held()))


class SqliteJobStore(SqlJobStore):
    """`JobStore` for SQLite."""

    def __init__(self) -> None:
        super().__init__(claim=CLAIM, renew=_RENEW, progress=_PROGRESS, settle_done=_SETTLE_DONE)

    def _held_params(self, held: Sequence[Job]) -> dict[str, Any]:
        return {"held": [(job.id, job.attempts, job.locked_by) for job in held]}

    def listener(self, db: Database, wake: asyncio.Event) -> JobListener | None:
        """None: SQLite cannot notify, so other processes' enqueues are found by polling."""
        return None
