"""Job status for the caller's account, mounted by `UstunPlugin` under its `path` ("/ustun"):
the job as the service shows it (`ETag` from its version, 304 on `If-None-Match`,
`Retry-After` while it runs), its server-sent events (resumed after `Last-Event-ID`, 204 once
the client has seen the final one) and its stored result. The caller's account is the name the
plugin scopes idempotency keys by (its `scope_of`); another account's job is a 404 problem.

The event stream is the service's: one reader per process (`ustun.jobs.watch.Watch`, on a
database of its own) feeds every open stream, capped per account and in all (429).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from litestar import Request, Response, Router, get
from litestar.types import ASGIApp
from starlette.types import Scope

from ustun.concurrency import conditional_read
from ustun.errors import NotFoundError
from ustun.http.preconditions import Preconditions
from ustun.jobs import Job
from ustun.jobs.adapters import plans as job_plans
from ustun.service.operations.job_routes import event_stream, result_file
from ustun.service.plumbing.job_representation import job_headers, render, validators
from ustun.store.plans import run

if TYPE_CHECKING:
    from ustun.litestar.plugin import UstunPlugin

# The names of the job routes (`request.url_for(JOB, job_id=…)`).
JOB = "ustun:job"
JOB_EVENTS = "ustun:job-events"
JOB_RESULT = "ustun:job-result"

AnyRequest = Request[Any, Any, Any]


def job_document(job: Job, request: AnyRequest) -> dict[str, Any]:
    """The job's JSON, as the service renders it, its `result_url` served here."""
    result = request.url_for(JOB_RESULT, job_id=job.id) if job.has_result else None
    return {**render(job), "result_url": result}


def job_response(job: Job, request: AnyRequest, status_code: int = 200) -> Response[Any]:
    """The job's JSON with `job_headers` (`ETag`, `Last-Modified`, `Retry-After` while it runs)."""
    return Response(job_document(job, request), status_code=status_code, headers=job_headers(job))


def accepted(job: Job, request: AnyRequest) -> Response[Any]:
    """202 Accepted for `job`: the job as its status resource shows it (with its `ETag`),
    `Location` that resource, `Retry-After` when to look."""
    response = job_response(job, request, status_code=202)
    response.headers["Location"] = request.url_for(JOB, job_id=job.id)
    return response


def job_router(plugin: UstunPlugin, path: str) -> Router:
    """The job routes of `plugin`'s database and accounts, under `path`."""

    async def owned(request: AnyRequest, job_id: str) -> Job:
        """The caller's account's job `job_id`; 404 `not-found` if it has none."""
        async with plugin.database.read() as conn:
            account = plugin.scope_of(cast("Scope", request.scope))
            plan = job_plans.named_job(job_id, account=account)
            found = await run(plan, conn, begin=False)
        if found is None:
            raise NotFoundError(f"No job {job_id!r} in this account.")
        return found

    @get("/jobs/{job_id:str}", name=JOB)
    async def job(request: AnyRequest, job_id: str, pre: Preconditions) -> Response[Any]:
        """The caller's job `job_id`; 304 when `If-None-Match` holds its current `ETag`."""
        found = await owned(request, job_id)
        if conditional_read(request.method, pre, validators(found)):
            return Response(None, status_code=304, headers=job_headers(found))
        return job_response(found, request)

    @get("/jobs/{job_id:str}/events", name=JOB_EVENTS)
    async def job_events(request: AnyRequest, job_id: str) -> ASGIApp:
        """Server-sent events of the caller's job `job_id` after `Last-Event-ID`, as the
        service sends them, to its final state."""
        found = await owned(request, job_id)
        last = request.headers.get("last-event-id")
        # The service's response (a Starlette one), which Litestar sends as the ASGI app it is.
        sent = await event_stream(plugin.watch, str(found.account_id), job_id, last)
        return cast("ASGIApp", sent)

    @get("/jobs/{job_id:str}/result", name=JOB_RESULT)
    async def job_result(request: AnyRequest, job_id: str) -> ASGIApp:
        """The file the caller's finished job `job_id` produced, with its media type and
        validators: the service's own response."""
        found = await owned(request, job_id)
        sent = await result_file(plugin.database, str(found.account_id), job_id)
        return cast("ASGIApp", sent)

    return Router(path, route_handlers=[job, job_events, job_result], tags=["jobs"])
