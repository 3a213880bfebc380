"""Events, jobs and 202s written on Django's connection, in the transaction open there."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse

from ustun.django.conf import ustun_settings
from ustun.django.db import host_connection
from ustun.django.views import job_response
from ustun.jobs.queue import enqueue_on
from ustun.jobs.records import Job
from ustun.webhooks.sending.outbox import emit_on


def emit(event_type: str, data: dict[str, Any], *, account: str) -> str:
    """Record the event `event_type` of `account` and queue its deliveries to the account's
    endpoints, in the current transaction (it is sent only if that commits); its id."""
    return emit_on(host_connection(), event_type, data, account=account)


def enqueue(kind: str, payload: dict[str, Any] | None = None, *, account: str) -> Job:
    """Add a job of `kind` for `account` in the current transaction; 429 `quota-exceeded`
    (a `ProblemError`) when the account has `USTUN["MAX_PENDING_JOBS"]` pending already."""
    max_pending = ustun_settings().max_pending_jobs
    return enqueue_on(host_connection(), kind, payload, account=account, max_pending=max_pending)


def job_url(job: Job, request: HttpRequest | None = None) -> str:
    """Where the job's status is served (`include("ustun.django.urls")`)."""
    try:
        path = reverse("ustun:job", kwargs={"job_id": job.id})
    except NoReverseMatch:
        raise LookupError(
            'the job status view is not routed: add path("ustun/", include("ustun.django.urls"))'
        ) from None
    return path if request is None else request.build_absolute_uri(path)


def accepted(job: Job, request: HttpRequest | None = None) -> HttpResponse:
    """202 Accepted for `job`: the job as its status view shows it (with its `ETag`),
    `Location` that view, `Retry-After` when to look."""
    response = job_response(job, request, status=202)
    response["Location"] = job_url(job, request)
    return response
