"""Events and jobs written through the request's session, in its transaction (committed with
the view's rows by `@idempotent`, or by the app's own `commit()`), and the 202 of a job."""

from __future__ import annotations

from typing import Any

from flask.helpers import url_for
from flask.json import jsonify
from flask.wrappers import Response

from ustun.flask.extension import current
from ustun.flask.jobs import job_document
from ustun.jobs.queue import enqueue_on
from ustun.jobs.records import Job
from ustun.service.plumbing.job_representation import job_headers
from ustun.webhooks.sending.outbox import emit_on


def emit(event_type: str, data: dict[str, Any], *, account: str) -> str:
    """Record the event `event_type` of `account` and queue its deliveries to the account's
    endpoints, in the session's transaction (it is sent only if that commits); its id."""
    return emit_on(current().connection(), event_type, data, account=account)


def enqueue(kind: str, payload: dict[str, Any] | None = None, *, account: str) -> Job:
    """Add a job of `kind` for `account` in the session's transaction; 429 `quota-exceeded`
    (a `ProblemError`) when the account has `USTUN_MAX_PENDING_JOBS` pending already."""
    ustun = current()
    max_pending = ustun.settings().max_pending_jobs
    return enqueue_on(ustun.connection(), kind, payload, account=account, max_pending=max_pending)


def accepted(job: Job) -> Response:
    """202 Accepted for `job`: the job as its status resource shows it (with its `ETag`),
    `Location` that resource, `Retry-After` when to look."""
    response = jsonify(job_document(job))
    response.status_code = 202
    response.headers.update(job_headers(job))
    response.headers["Location"] = url_for("ustun.job", job_id=job.id, _external=True)
    return response
