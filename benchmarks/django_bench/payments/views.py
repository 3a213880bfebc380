"""The four variants of `POST /payments`: the payment and its event, in one transaction.

(a) `Plain`: by hand, no idempotency; the event is a row of the app's own outbox table.
(b) `ByHand`: (a) with ustun's own statements run by hand, as `@idempotent` runs them: the
    key's lock and read (`lock_key`), the payment, `emit`, the record (`settle_key`), in the
    view's `transaction.atomic`: the ceiling of ustun's SQL shape.
(c) `PeerKeys`: (a) under django-idempotency-key (`@idempotency_key`, its middleware, a
    database cache): the key read before the view and its answer stored after its transaction.
(d) `Ustun`: `@idempotent("required")` and `emit`.
"""

import hashlib
from typing import Any

from django.db import transaction
from idempotency_key.decorators import idempotency_key
from rest_framework import status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from payments.models import Event
from payments.serializers import PaymentSerializer
from ustun.django import emit, idempotent
from ustun.django.db import host_connection
from ustun.idempotency.records import StoredResponse
from ustun.idempotency.sql import lock_key, settle_key
from ustun.store.plans import run_sync

ACCOUNT = "bench"
TTL = 24 * 3600.0


def _payment(request: Request) -> dict[str, Any]:
    serializer = PaymentSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    serializer.save()
    data: dict[str, Any] = serializer.data
    return data


def _outbox(data: dict[str, Any]) -> None:
    Event.objects.create(type="payment.created", data=data)


class Plain(viewsets.ViewSet):
    def create(self, request: Request) -> Response:
        with transaction.atomic():
            data = _payment(request)
            _outbox(data)
        return Response(data, status=status.HTTP_201_CREATED)


class _Rollback(Exception):
    pass


class ByHand(viewsets.ViewSet):
    def create(self, request: Request) -> Any:
        key = request.headers.get("Idempotency-Key")
        if not key:
            return Response({"detail": "Idempotency-Key required"}, status=400)
        raw = request._request
        print_ = hashlib.sha256(b"POST " + raw.path.encode() + b"\n" + raw.body).hexdigest()
        try:
            with transaction.atomic():
                conn = host_connection()
                lookup = run_sync(lock_key("", key, max_bytes=None), conn)
                if lookup.record is not None or not lookup.held:
                    raise _Rollback
                data = _payment(request)
                emit("payment.created", data, account=ACCOUNT)
                response = self.finalize_response(
                    request, Response(data, status=status.HTTP_201_CREATED)
                )
                response.render()
                headers = (("Content-Type", response["Content-Type"]),)
                stored = StoredResponse(response.status_code, headers, response.content)
                if run_sync(settle_key("", key, print_, stored, ttl=TTL), conn) is not None:
                    raise _Rollback
        except _Rollback:
            return Response({"detail": "replay or in progress"}, status=409)
        return response


class PeerKeys(viewsets.ViewSet):
    @idempotency_key
    def create(self, request: Request) -> Response:
        with transaction.atomic():
            data = _payment(request)
            _outbox(data)
        return Response(data, status=status.HTTP_201_CREATED)


class Ustun(viewsets.ViewSet):
    @idempotent("required")
    def create(self, request: Request) -> Response:
        data = _payment(request)
        emit("payment.created", data, account=ACCOUNT)
        return Response(data, status=status.HTTP_201_CREATED)
