"""Job status (placeholder until the job views land)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def job(request: HttpRequest, job_id: str) -> HttpResponse:
    return HttpResponse(status=501)
