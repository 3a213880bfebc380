"""Views that fail on purpose, for the tests: routed only when `SHOP_FAULTS` names a folder.

`POST /faults/raise` writes a payment and its event, then raises. `POST /faults/wait` writes
them, creates `<SHOP_FAULTS>/entered`, and answers once `<SHOP_FAULTS>/release` exists (a
test kills the server in between).
"""

import os
import time
from pathlib import Path

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from shop.serializers import PaymentSerializer
from ustun.django import emit, idempotent


def _pay(request: Request) -> dict:
    serializer = PaymentSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    serializer.save(owner=request.user)
    emit("payment.created", serializer.data, account=str(request.user.pk))
    return serializer.data


@api_view(["POST"])
@idempotent("required")
def fail(request: Request) -> Response:
    _pay(request)
    raise RuntimeError("the view failed after writing")


@api_view(["POST"])
@idempotent("required")
def wait(request: Request) -> Response:
    data = _pay(request)
    folder = Path(os.environ["SHOP_FAULTS"])
    (folder / "entered").touch()
    deadline = time.monotonic() + 60
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return Response(data, status=201)
