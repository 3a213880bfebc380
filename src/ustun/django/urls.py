"""`path("ustun/", include("ustun.django.urls"))`: job status for the caller's account, its
server-sent events and its result (`ustun.django.views`)."""

from __future__ import annotations

from django.urls import path

from ustun.django.views import job, job_events, job_result, routed

app_name = "ustun"
urlpatterns = [
    path("jobs/<str:job_id>", routed(job), name="job"),
    path("jobs/<str:job_id>/events", routed(job_events), name="job-events"),
    path("jobs/<str:job_id>/result", routed(job_result), name="job-result"),
]
