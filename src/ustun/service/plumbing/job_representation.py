"""A job as the API shows it: its JSON, validators and `Retry-After`, and the response that
carries them; the jobs routes answer with it, and so does a route that starts a job (a 202).
Its events as server-sent event blocks (`event_block`), and `Follow`: a stream of them read
from a synchronous connection, as Django's and Flask's job views serve it."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi.responses import Response

from ustun import clock, jobs
from ustun.clock import rfc3339, rfc3339_or_none
from ustun.concurrency import Version
from ustun.http.preconditions import Validators
from ustun.jobs.adapters import plans as job_plans
from ustun.service.plumbing.conditional import representation, validator_headers
from ustun.store.dbapi import DbapiConnection
from ustun.store.plans import run_sync

# The least wait (seconds) `Retry-After` asks for between two polls of an unfinished job.
POLL_AFTER = 1


def job_url(job_id: str) -> str:
    """Where a job resource lives (the `Location` of a 202)."""
    return f"/v1/jobs/{job_id}"


def render(job: jobs.Job) -> dict[str, Any]:
    """The public JSON shape of a job."""
    return {
        "id": job.id,
        "object": "job",
        "kind": job.kind,
        "status": job.status,
        "progress": job.progress,
        "created_at": rfc3339(job.created_at),
        "started_at": rfc3339_or_none(job.started_at),
        "completed_at": rfc3339_or_none(job.completed_at),
        "result_url": f"{job_url(job.id)}/result" if job.has_result else None,
        "error": job.error,
        "cancel_requested": job.cancel_requested,
    }


def validators(job: jobs.Job) -> Validators:
    """The job's `ETag` (its version) and `Last-Modified` (its last change)."""
    return Validators(Version(job.version).etag, job.updated_at)


def poll_headers(job: jobs.Job) -> dict[str, str]:
    """`Retry-After` (seconds until worth polling again) while the job is not finished."""
    if job.status in jobs.FINAL:
        return {}
    wait = (job.run_at - clock.now()).total_seconds()
    return {"retry-after": str(max(POLL_AFTER, math.ceil(wait)))}


def job_headers(job: jobs.Job) -> dict[str, str]:
    """The job's validators (`ETag`, `Last-Modified`) and, while it runs, `Retry-After`: the
    headers of its representation, also where a framework other than the service's serves it."""
    return {**validator_headers(validators(job)), **poll_headers(job)}


def respond(job: jobs.Job, status_code: int = 200) -> Response:
    """The job as a response with its validators and `Retry-After`."""
    return representation(
        render(job), validators(job), status=status_code, headers=poll_headers(job)
    )


# The reconnection delay an event stream's first block tells its client, and how long a
# stream stays quiet before it sends a comment (so that proxies keep it open).
SSE_RETRY_MS = 1000
SSE_KEEPALIVE = 15.0


def event_block(event: jobs.JobEvent, *, retry: bool = False) -> str:
    """One server-sent event block of `event`; `retry` prefixes the reconnection delay (not
    a block of its own, which some clients would surface as an empty message)."""
    data = {
        "id": event.job_id,
        "status": event.status,
        "progress": event.progress,
        "at": rfc3339(event.created_at),
    }
    prefix = f"retry: {SSE_RETRY_MS}\n" if retry else ""
    return f"{prefix}id: {event.version}\nevent: {event.type}\ndata: {json.dumps(data)}\n\n"


# Seconds between two reads of a followed job's events.
STREAM_POLL = 0.5
# Seconds a followed stream stays open at most (an `EventSource` then reconnects with
# `Last-Event-ID`): below gunicorn's default worker timeout, 30 s, which kills a sync worker
# busy for longer.
STREAM_LIFETIME = 25.0


class Follow:
    """One open stream of `job`'s events after version `after`, read on a synchronous
    connection: each read's blocks, and when to read again. The framework drives it (a WSGI
    iterator: `blocks`; an async one under ASGI) and gives the connection of each read."""

    def __init__(
        self, job: jobs.Job, after: int, connection: Callable[[], DbapiConnection]
    ) -> None:
        self.job = job
        self.after = after
        self.connection = connection
        self.first = True
        self.start = self.quiet_since = time.monotonic()

    @classmethod
    def resume(
        cls, job: jobs.Job, after: int, connection: Callable[[], DbapiConnection]
    ) -> Follow | None:
        """The stream of `job` after the client's `Last-Event-ID` (`after`; an id past the
        job's version counts as its current one, as in the service), or None when the client
        has seen its final event: the framework answers 204, which stops an `EventSource`."""
        after = min(after, job.version)
        if job.status in jobs.FINAL and after >= job.version:
            return None
        return cls(job, after, connection)

    def read(self) -> list[jobs.JobEvent]:
        """The job's events after the last one sent, on the connection."""
        return run_sync(job_plans.events_after(self.job, self.after), self.connection())

    def send(self, events: list[jobs.JobEvent]) -> tuple[list[str], float | None]:
        """The blocks of `events` (a comment when quiet for `SSE_KEEPALIVE`), and the seconds
        until the next read: None once the job is final or the stream's lifetime is over."""
        blocks = []
        for event in events:
            blocks.append(event_block(event, retry=self.first))
            self.first, self.after = False, event.version
            if event.status in jobs.FINAL:
                return blocks, None
        now = time.monotonic()
        if now - self.start >= STREAM_LIFETIME:
            return blocks, None
        if events:
            self.quiet_since = now
        elif now - self.quiet_since >= SSE_KEEPALIVE:
            blocks.append(": keep-alive\n\n")
            self.quiet_since = now
        return blocks, STREAM_POLL if len(events) < job_plans.EVENTS_PAGE else 0.0

    def blocks(self, *, after_read: Callable[[], None] = lambda: None) -> Iterator[str]:
        """The stream's blocks under WSGI, the worker waiting between reads; `after_read` runs
        after each read (to end the read's transaction, so that a stream holds no connection
        while it waits)."""
        while True:
            events = self.read()
            after_read()
            blocks, wait = self.send(events)
            yield from blocks
            if wait is None:
                return
            time.sleep(wait)
