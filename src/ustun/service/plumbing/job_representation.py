"""A job as the API shows it: its JSON, validators and `Retry-After`, and the response that
carries them; the jobs routes answer with it, and so does a route that starts a job (a 202)."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.responses import Response

from ustun import clock, jobs
from ustun.clock import rfc3339, rfc3339_or_none
from ustun.concurrency import Version
from ustun.http.preconditions import Validators
from ustun.service.plumbing.conditional import representation, validator_headers

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
