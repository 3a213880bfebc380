"""Dashboard pages of the jobs pillar: the list, a job's detail with live progress, cancel.

Reads and actions go through the jobs pillar and the service's job operations (not its route
handlers); the live progress is the job's own SSE stream, served here behind the dashboard
session (a browser's EventSource cannot send the API key, and the key never reaches the browser
anyway).
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ustun import jobs
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.errors import NotFoundError, ProblemError
from ustun.service.dashboard.web import LoggedIn, Posting, Viewer, page, see_other
from ustun.service.operations import job_routes
from ustun.service.plumbing import job_representation

router = APIRouter(prefix="/dashboard", include_in_schema=False)

Cursor = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_]+$")]
Filter = Annotated[str | None, Query(max_length=20)]


@router.get("/jobs")
async def job_list(
    request: Request, who: LoggedIn, status: Filter = None, cursor: Cursor = None
) -> Response:
    """The account's jobs, newest first, optionally of one status."""
    chosen = cast(jobs.JobStatusValue, status) if status in jobs.STATUSES else None
    db = request.app.state.db
    listed = await jobs.page(
        db, who.account.id, status=chosen, limit=DEFAULT_PAGE_SIZE, cursor=cursor
    )
    return page(
        request,
        "jobs.html",
        who,
        nav="jobs",
        jobs=job_routes.render_page(listed),
        statuses=list(jobs.STATUSES),
        status=chosen or "",
    )


async def _job_page(
    request: Request, who: Viewer, job_id: str, *, error: str | None = None
) -> Response:
    job = await jobs.get(request.app.state.db, job_id, account_id=who.account.id)
    if job is None:
        raise NotFoundError(f"No job {job_id!r} in this account.")
    return page(
        request,
        "job.html",
        who,
        nav="jobs",
        job=job_representation.render(job),
        final=job.status in jobs.FINAL,
        error=error,
    )


@router.get("/jobs/{job_id}")
async def job_detail(request: Request, who: LoggedIn, job_id: str) -> Response:
    """One job, its progress following the job's event stream live."""
    return await _job_page(request, who, job_id)


@router.get("/jobs/{job_id}/events")
async def job_events(request: Request, who: LoggedIn, job_id: str) -> Response:
    """The job's SSE stream (status and progress), for the logged-in account's job only; the
    API's rules apply (400 for a bad `Last-Event-ID`, 204 once the final event was seen)."""
    return await job_routes.event_stream(
        request.app.state.job_watch, who.account.id, job_id, request.headers.get("last-event-id")
    )


@router.get("/jobs/{job_id}/result")
async def job_result(request: Request, who: LoggedIn, job_id: str) -> Response:
    """Download the file a finished job produced."""
    return await job_routes.result_file(request.app.state.db, who.account.id, job_id)


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, who: Posting, job_id: str) -> Response:
    """Cancel a pending job or ask a running one to stop."""
    try:
        await job_routes.cancel(request.app.state.db, who.account.id, job_id)
    except ProblemError as exc:
        if isinstance(exc, NotFoundError):
            raise
        return await _job_page(request, who, job_id, error=exc.detail)
    return see_other(f"/dashboard/jobs/{job_id}")
