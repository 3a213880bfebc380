from django.http import HttpResponse
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from ustun.django import accepted, enqueue, idempotent

MAX_ROWS = 10_000


class ReportRequest(serializers.Serializer):
    rows = serializers.IntegerField(min_value=1, max_value=MAX_ROWS)


class Reports(APIView):
    """`POST /reports {"rows": N}`: 202 with the report's job; follow `Location` (poll it with
    `If-None-Match`, or its `/events`) to the CSV at its `result_url`."""

    @idempotent("required")
    def post(self, request: Request) -> HttpResponse:
        asked = ReportRequest(data=request.data)
        asked.is_valid(raise_exception=True)
        job = enqueue("shop.report", asked.validated_data, account=str(request.user.pk))
        return accepted(job, request)
