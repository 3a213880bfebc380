"""Job status for the caller's account, read on the session's connection: the `ustun`
blueprint's `GET <prefix>/jobs/<job_id>`, the job as the service shows it (`ETag` from its
version, 304 on `If-None-Match`, `Retry-After` while it runs), `GET
<prefix>/jobs/<job_id>/events`, its server-sent events (resumed after `Last-Event-ID`), and `GET
<prefix>/jobs/<job_id>/result`, the file it produced. The caller's account is the name
`@idempotent` scopes keys by (`scope_of`); another account's job is a 404 problem.

The event stream reads the job's new events every `STREAM_POLL` seconds, each read in a
transaction of its own (the stream holds no connection while it waits); it ends at the job's
final state or after `STREAM_LIFETIME` seconds (25: an `EventSource` then reconnects with
`Last-Event-ID`), as Django's does (`job_representation.Follow`). Each open stream holds a
gunicorn worker while it lasts: serve the app with threads (`--threads`) or a worker class
that does not block.
"""

from __future__ import annotations

from typing import Any

from flask.blueprints import Blueprint
from flask.globals import request
from flask.helpers import stream_with_context, url_for
from flask.json import jsonify
from flask.wrappers import Response

from ustun.concurrency import conditional_read
from ustun.errors import NotFoundError
from ustun.flask.extension import current
from ustun.flask.idempotency import scope_of
from ustun.http.last_event_id import parse_last_event_id
from ustun.http.preconditions import Preconditions
from ustun.http.sse_parser import MEDIA_TYPE as EVENT_STREAM
from ustun.jobs import Job
from ustun.jobs.adapters import plans as job_plans
from ustun.service.plumbing.job_representation import Follow, job_headers, render, validators
from ustun.store.plans import run_sync

blueprint = Blueprint("ustun", __name__)


def job_document(job: Job) -> dict[str, Any]:
    """The job's JSON, as the service renders it, its `result_url` served here."""
    result = url_for("ustun.job_result", job_id=job.id, _external=True) if job.has_result else None
    return {**render(job), "result_url": result}


def _owned(job_id: str) -> Job:
    """The caller's account's job `job_id`; 404 `not-found` if it has none."""
    conn = current().connection()
    found = run_sync(job_plans.named_job(job_id, account=scope_of(request)), conn)
    if found is None:
        raise NotFoundError(f"No job {job_id!r} in this account.")
    return found


@blueprint.get("/jobs/<job_id>")
def job(job_id: str) -> Response:
    """The caller's job `job_id`; 304 when `If-None-Match` holds its current `ETag`."""
    found = _owned(job_id)
    headers = job_headers(found)
    if conditional_read(
        request.method, Preconditions.from_headers(request.headers.items()), validators(found)
    ):
        return Response(status=304, headers=headers)
    response = jsonify(job_document(found))
    response.headers.update(headers)
    return response


@blueprint.get("/jobs/<job_id>/events")
def job_events(job_id: str) -> Response:
    """Server-sent events of the caller's job `job_id`, after `Last-Event-ID`, as the service
    sends them; 204 once the client has seen the final one (an `EventSource` then stops)."""
    after = parse_last_event_id(request.headers.get("Last-Event-ID"))
    ustun = current()
    follow = Follow.resume(_owned(job_id), after, ustun.connection)
    # The lookup's transaction ends here, each read's after it: none stays open while it waits.
    ustun.session.rollback()
    if follow is None:
        return Response(status=204)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if request.method == "HEAD":
        return Response(mimetype=EVENT_STREAM, headers=headers)
    blocks = stream_with_context(follow.blocks(after_read=ustun.session.rollback))
    return Response(blocks, mimetype=EVENT_STREAM, headers=headers)


@blueprint.get("/jobs/<job_id>/result")
def job_result(job_id: str) -> Response:
    """The file the caller's finished job `job_id` produced, with its media type."""
    found = _owned(job_id)
    stored = run_sync(job_plans.result(job_id, account_id=found.account_id), current().connection())
    if stored is None:
        raise NotFoundError(f"Job {job_id!r} has no result (yet).")
    disposition = f'attachment; filename="{stored.filename}"'
    return Response(
        stored.content, mimetype=stored.media_type, headers={"Content-Disposition": disposition}
    )
