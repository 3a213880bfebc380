"""Job resources: `GET /v1/jobs[/{id}]`, cancel, the stored result, and the SSE event stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ustun import jobs
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.errors import NotFoundError
from ustun.http.last_event_id import parse_last_event_id
from ustun.jobs.watch import Stream, Watch
from ustun.service.plumbing.conditional import (
    Conditions,
    conditional_get,
    validator_headers,
)
from ustun.service.plumbing.deps import DB, CurrentAccount, Cursor, Limit
from ustun.service.plumbing.job_representation import (
    SSE_KEEPALIVE,
    event_block,
    job_url,
    poll_headers,
    render,
    respond,
    validators,
)
from ustun.store import Database, UnitOfWork
from ustun.webhooks.sending.outbox import emit

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


async def emit_final(uow: UnitOfWork, job: jobs.Job) -> None:
    """`job.completed` / `job.failed` into the webhook outbox, in the final state's transaction."""
    if job.account_id is not None:
        kind = "job.completed" if job.status == jobs.DONE else "job.failed"
        await emit(uow, job.account_id, kind, render(job), object_url=job_url(job.id))


def register(kinds: jobs.Registry) -> None:
    """Emit `job.completed` / `job.failed` for the jobs of `kinds`.

    The hook acts only on an account's jobs (others have no subscribers): settling a batch of
    account-less jobs needs no transaction around its one UPDATE.
    """
    kinds.on_final(emit_final, acts_on=lambda job: job.account_id is not None)


def _not_found(job_id: str) -> NotFoundError:
    return NotFoundError(f"No job {job_id!r} in this account.")


async def _owned(db: Database, account_id: str, job_id: str) -> jobs.Job:
    job = await jobs.get(db, job_id, account_id=account_id)
    if job is None:
        raise _not_found(job_id)
    return job


@router.get("")
async def list_jobs(
    account: CurrentAccount,
    db: DB,
    status: jobs.JobStatusValue | None = None,
    limit: Limit = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The account's jobs, newest first, optionally only those in one status."""
    return render_page(await jobs.page(db, account.id, status=status, limit=limit, cursor=cursor))


def render_page(listed: jobs.JobPage) -> dict[str, Any]:
    """The public JSON shape of a page of jobs."""
    return {"data": [render(job) for job in listed.jobs], "next_cursor": listed.next_cursor}


@router.head("/{job_id}", response_model=None, operation_id="head_job")
@router.get("/{job_id}", response_model=None)
async def get_job(
    job_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """One job; 304 when the poller's `If-None-Match` still matches (RFC 9110 §13.2.2)."""
    job = await _owned(db, account.id, job_id)
    return conditional_get(request, pre, validators(job), render(job), headers=poll_headers(job))


@router.post("/{job_id}/cancel", response_model=None)
async def cancel_job(job_id: str, account: CurrentAccount, db: DB) -> Response:
    """Cancel a pending job, or ask a running one to stop; 409 once it has finished."""
    return respond(await cancel(db, account.id, job_id))


async def cancel(db: Database, account_id: str, job_id: str) -> jobs.Job:
    """Cancel the account's job `job_id` (404 if it has none, 409 once it has finished)."""
    job = await jobs.cancel(db, job_id, account_id=account_id)
    if job is None:
        raise _not_found(job_id)
    return job


@router.get("/{job_id}/result", response_model=None)
async def job_result(job_id: str, account: CurrentAccount, db: DB) -> Response:
    """The file a finished job produced, with its media type."""
    return await result_file(db, account.id, job_id)


async def result_file(db: Database, account_id: str, job_id: str) -> Response:
    """The file the account's finished job `job_id` produced (404 if none), with its media
    type and validators."""
    job = await _owned(db, account_id, job_id)
    stored = await jobs.result(db, job_id, account_id=account_id)
    if stored is None:
        raise NotFoundError(f"Job {job_id!r} has no result (it is {job.status}).")
    return Response(
        stored.content,
        media_type=stored.media_type,
        headers={
            **validator_headers(validators(job)),
            "content-disposition": f'attachment; filename="{stored.filename}"',
        },
    )


class _EventStream(StreamingResponse):
    """The response of an open stream: closes it however the response ends (the client
    leaving cancels it mid-body; a HEAD never reads the body)."""

    def __init__(self, watch: Watch, stream: Stream) -> None:
        super().__init__(
            _blocks(watch, stream),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
        self._watch = watch
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._watch.close(self._stream)


async def _blocks(watch: Watch, stream: Stream) -> AsyncIterator[str]:
    """The stream's event blocks, a comment when quiet for `SSE_KEEPALIVE`, to the final state;
    closed as soon as there is no more, before the body's end goes out (so a client that
    opens another stream then finds the place free)."""
    first = True
    try:
        while True:
            try:
                async with asyncio.timeout(SSE_KEEPALIVE):
                    events = await stream.next()
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            for event in events:
                yield event_block(event, retry=first)
                first = False
                if event.status in jobs.FINAL:
                    return
            if stream.ended:
                return
    finally:
        watch.close(stream)


@router.get("/{job_id}/events", response_model=None)
async def job_events(
    job_id: str,
    request: Request,
    account: CurrentAccount,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Server-sent events of the job's status and progress; resumes after `Last-Event-ID`.

    Events come from the database, so they flow whichever process runs the job; the stream
    ends after the final state. A client that has already seen the final event (its
    `Last-Event-ID` is at or past it) gets 204, which stops an `EventSource` from
    reconnecting (WHATWG HTML §9.2.3); an id past the job's current version counts as current.
    Past the account's or the server's cap on open streams: 429, before any database work.
    """
    return await event_stream(request.app.state.job_watch, account.id, job_id, last_event_id)


async def event_stream(
    watch: Watch, account_id: str, job_id: str, last_event_id: str | None
) -> Response:
    """The SSE response of the account's job `job_id` after `last_event_id` (see
    `job_events`)."""
    after = parse_last_event_id(last_event_id)
    stream = watch.open(account_id, job_id, after)
    try:
        if not await stream.opened():
            raise _not_found(job_id)
    except BaseException:
        watch.close(stream)
        raise
    if stream.exhausted:
        watch.close(stream)
        return Response(status_code=204)
    return _EventStream(watch, stream)
