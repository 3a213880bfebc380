"""`path("ustun/", include("ustun.django.urls"))`: job status for the caller's account."""

from __future__ import annotations

from django.urls import path

from ustun.django import views

app_name = "ustun"
urlpatterns = [path("jobs/<str:job_id>", views.job, name="job")]
