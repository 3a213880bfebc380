"""A view that fails on purpose, for the tests: routed only when `SHOP_FAULTS` is set.

`POST /faults/report` enqueues a report, then raises: its job must not be committed.
"""

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from ustun.django import enqueue, idempotent


@api_view(["POST"])
@idempotent("required")
def fail(request: Request) -> Response:
    enqueue("shop.report", {"rows": 1}, account=str(request.user.pk))
    raise RuntimeError("the view failed after enqueueing")
