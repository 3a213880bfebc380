"""Job status for the caller's account (`include("ustun.django.urls")`), read on Django's
connection: the job as the service shows it (`ETag` from its version, 304 on `If-None-Match`,
`Retry-After` while it runs), its server-sent events (resumed after `Last-Event-ID`) and its
stored result. The caller's account is the name `@idempotent` scopes keys by (`scope_of`);
another account's job is a 404 problem.

With Django REST framework installed the views are DRF `APIView`s with the project's default
authentication and permission classes, so a job's caller is the user the app's DRF views see;
without it, `request.user` from Django's middleware.

The event stream is a `StreamingHttpResponse` that reads the job's new events every
`STREAM_POLL` seconds (`job_representation.Follow`, which Flask's job views serve too); it
ends at the job's final state or after `STREAM_LIFETIME` seconds (an `EventSource` then
reconnects with `Last-Event-ID`). Under WSGI each open stream holds a
worker (a sync gunicorn worker, a thread) while it lasts: the lifetime stays below gunicorn's
default `--timeout` of 30 s, which kills a sync worker busy for longer. Under ASGI it is an
async iterator: it waits on the event loop and reads in Django's sync thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import reverse
from django.views.decorators.http import require_safe

from ustun.concurrency import conditional_read
from ustun.django.db import host_connection
from ustun.django.idempotency import scope_of
from ustun.django.problems import response_of
from ustun.errors import NotFoundError, ProblemError
from ustun.http.last_event_id import parse_last_event_id
from ustun.http.preconditions import Preconditions
from ustun.http.sse_parser import MEDIA_TYPE as EVENT_STREAM
from ustun.jobs import Job
from ustun.jobs.adapters import plans as job_plans
from ustun.service.plumbing.conditional import validator_headers
from ustun.service.plumbing.job_representation import Follow, job_headers, render, validators
from ustun.store.plans import run_sync

JobView = Callable[[HttpRequest, str], HttpResponseBase]


def job_document(job: Job, request: HttpRequest | None = None) -> dict[str, Any]:
    """The job's JSON, as the service renders it, its `result_url` served here."""
    result = None
    if job.has_result:
        path = reverse("ustun:job-result", kwargs={"job_id": job.id})
        result = path if request is None else request.build_absolute_uri(path)
    return {**render(job), "result_url": result}


def job_response(job: Job, request: HttpRequest | None = None, status: int = 200) -> HttpResponse:
    """The job's JSON with `job_headers`."""
    return JsonResponse(job_document(job, request), status=status, headers=job_headers(job))


def _owned(request: HttpRequest, job_id: str) -> Job:
    """The caller's account's job `job_id`; 404 `not-found` if it has none."""
    found = run_sync(job_plans.named_job(job_id, account=scope_of(request)), host_connection())
    if found is None:
        raise NotFoundError(f"No job {job_id!r} in this account.")
    return found


def _problems_answered(view: JobView) -> JobView:
    """`view` with the `ProblemError`s it raises answered as problem+json (with or without
    `IdempotencyMiddleware`)."""

    @functools.wraps(view)
    def answering(request: HttpRequest, job_id: str) -> HttpResponseBase:
        try:
            return view(request, job_id)
        except ProblemError as error:
            return response_of(error, request)

    return answering


@_problems_answered
def job(request: HttpRequest, job_id: str) -> HttpResponseBase:
    """The caller's job `job_id`; 304 when `If-None-Match` holds its current `ETag`."""
    found = _owned(request, job_id)
    pre = Preconditions.from_headers(request.headers.items())
    if conditional_read(request.method or "GET", pre, validators(found)):
        return HttpResponse(status=304, headers=job_headers(found))
    return job_response(found, request)


@_problems_answered
def job_events(request: HttpRequest, job_id: str) -> HttpResponseBase:
    """Server-sent events of the caller's job `job_id`, after `Last-Event-ID`, as the service
    sends them; 204 once the client has seen the final one (an `EventSource` then stops)."""
    after = parse_last_event_id(request.headers.get("Last-Event-ID"))
    follow = Follow.resume(_owned(request, job_id), after, host_connection)
    if follow is None:
        return HttpResponse(status=204)
    blocks: Iterator[str] | AsyncIterator[str]
    if request.method == "HEAD":
        blocks = iter(())
    elif isinstance(getattr(request, "_request", request), ASGIRequest):
        blocks = _async_blocks(follow)
    else:
        blocks = follow.blocks()
    return StreamingHttpResponse(
        blocks,
        content_type=EVENT_STREAM,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _async_blocks(follow: Follow) -> AsyncIterator[str]:
    """The stream's blocks under ASGI (a sync iterator would be read to its end before the
    first byte went out): the reads in Django's sync thread, the waits on the event loop
    (`Follow.blocks` is the WSGI one)."""
    read = sync_to_async(follow.read)
    while True:
        blocks, wait = follow.send(await read())
        for block in blocks:
            yield block
        if wait is None:
            return
        await asyncio.sleep(wait)


@_problems_answered
def job_result(request: HttpRequest, job_id: str) -> HttpResponseBase:
    """The file the caller's finished job `job_id` produced, with its media type."""
    found = _owned(request, job_id)
    stored = run_sync(job_plans.result(job_id, account_id=found.account_id), host_connection())
    if stored is None:
        raise NotFoundError(f"Job {job_id!r} has no result (it is {found.status}).")
    return HttpResponse(
        stored.content,
        content_type=stored.media_type,
        headers={
            **validator_headers(validators(found)),
            "Content-Disposition": f'attachment; filename="{stored.filename}"',
        },
    )


def routed(view: JobView) -> Callable[..., HttpResponseBase]:
    """`view` as `urls.py` routes it: for GET and HEAD, authenticated as the app's DRF views
    are when Django REST framework is installed."""
    try:
        from rest_framework.renderers import BaseRenderer
        from rest_framework.request import Request
        from rest_framework.views import APIView
    except ImportError:
        return require_safe(view)

    class JobResource(APIView):
        __doc__ = view.__doc__

        def get(self, request: Request, job_id: str) -> HttpResponseBase:
            return view(request, job_id)

        def perform_content_negotiation(
            self, request: Request, force: bool = False
        ) -> tuple[BaseRenderer, str]:
            # The views answer JSON, event streams and files themselves, whatever `Accept`.
            return super().perform_content_negotiation(request, force=True)

    JobResource.__name__ = JobResource.__qualname__ = view.__name__
    return JobResource.as_view()
