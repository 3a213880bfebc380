"""Job status for the caller's account, read on the session's connection: the `ustun`
blueprint's `GET <prefix>/jobs/<job_id>`, the job as the service shows it (`ETag` from its
version, 304 on `If-None-Match`, `Retry-After` while it runs), and `GET
<prefix>/jobs/<job_id>/result`, the file it produced. The caller's account is the name
`@idempotent` scopes keys by (`scope_of`); another account's job is a 404 problem."""

from __future__ import annotations

from typing import Any

from flask.blueprints import Blueprint
from flask.globals import request
from flask.helpers import url_for
from flask.json import jsonify
from flask.wrappers import Response

from ustun.concurrency import conditional_read
from ustun.errors import NotFoundError
from ustun.flask.extension import current
from ustun.flask.idempotency import scope_of
from ustun.http.preconditions import Preconditions
from ustun.jobs import Job
from ustun.jobs.adapters import plans as job_plans
from ustun.service.plumbing.job_representation import job_headers, render, validators
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
