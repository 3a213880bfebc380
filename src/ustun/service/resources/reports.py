"""Reports: `POST /v1/reports` answers 202 with a job that builds the file in the background."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import func, select

from ustun import clock, jobs
from ustun.service.plumbing.deps import DB, AppSettings, CurrentAccount, JobKinds
from ustun.service.plumbing.job_representation import job_url, respond
from ustun.service.resources.report_formats import FORMATS, Report
from ustun.service.resources.schema import payments

router = APIRouter(prefix="/v1/reports", tags=["reports"])

KIND = "report"
PAGE = 1_000
# Payments begin at the Unix epoch; 9999 is out, as its end (1 January 10000) is past what
# `datetime` can represent.
FIRST_YEAR, LAST_YEAR = 1970, 9998


class ReportRequest(BaseModel):
    """What to report on: a year (`2026`) or a month (`2026-06`), and the file format."""

    model_config = ConfigDict(extra="forbid")

    period: str = Field(
        pattern=r"^[0-9]{4}(-(0[1-9]|1[0-2]))?$",
        examples=["2026", "2026-06"],
        description=f"A year from {FIRST_YEAR} to {LAST_YEAR}, or a month of one (`YYYY-MM`).",
    )
    format: Literal["csv", "json", "pdf"]

    @field_validator("period")
    @classmethod
    def _real_year(cls, period: str) -> str:
        if not FIRST_YEAR <= int(period[:4]) <= LAST_YEAR:
            raise ValueError(f"the year must be from {FIRST_YEAR} to {LAST_YEAR}")
        return period


def period_bounds(period: str) -> tuple[datetime, datetime]:
    """The UTC interval `[start, end)` a period covers."""
    year, _, month = period.partition("-")
    if not month:
        return datetime(int(year), 1, 1, tzinfo=UTC), datetime(int(year) + 1, 1, 1, tzinfo=UTC)
    start = datetime(int(year), int(month), 1, tzinfo=UTC)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start, end


@router.post("", status_code=202, response_model=None)
async def create_report(
    body: ReportRequest, account: CurrentAccount, db: DB, kinds: JobKinds, settings: AppSettings
) -> Response:
    """Start building a report; follow `Location` (poll, SSE) to its result."""
    async with db.unit_of_work():
        job = await jobs.enqueue(
            db,
            KIND,
            body.model_dump(),
            account_id=account.id,
            kinds=kinds,
            max_pending=settings.max_pending_jobs,
        )
    response = respond(job, status_code=202)
    response.headers["location"] = job_url(job.id)
    return response


def register(kinds: jobs.Registry) -> None:
    """Add the report job kind to `kinds`."""
    kinds.register(KIND, build_report)


async def build_report(ctx: jobs.JobContext) -> jobs.Result:
    """Read the account's payments of the period page by page, then render the file in the
    runner's worker process (CPU work that would hold the event loop for seconds)."""
    period, fmt = ctx.payload["period"], FORMATS[ctx.payload["format"]]
    start, end = period_bounds(period)
    where = [
        payments.c.account_id == ctx.account_id,
        payments.c.created_at >= start,
        payments.c.created_at < end,
    ]
    async with ctx.db.read() as conn:
        total = await conn.scalar(select(func.count()).select_from(payments).where(*where)) or 0
    report = Report(period=period, generated_at=clock.now())
    last_id = ""
    while True:
        async with ctx.db.read() as conn:
            rows = (
                await conn.execute(
                    select(
                        payments.c.id,
                        payments.c.created_at,
                        payments.c.amount,
                        payments.c.currency,
                        payments.c.status,
                    )
                    .where(*where, payments.c.id > last_id)
                    .order_by(payments.c.id)
                    .limit(PAGE)
                )
            ).all()
        for row in rows:
            report.add(*row)
        if len(rows) < PAGE:
            break
        last_id = rows[-1].id
        await ctx.progress(90 * len(report.ids) // max(total, 1))
    await ctx.progress(90)
    name = f"payments-{period}.{ctx.payload['format']}"
    return jobs.Result(await ctx.offload(fmt.render, report), fmt.media_type, name)
