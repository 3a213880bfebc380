"""`ConditionalMixin`: optimistic concurrency for DRF generic views and viewsets over a
`Versioned` model, with the service's preconditions, problem types and ETags.

    class DocumentViewSet(ConditionalMixin, viewsets.ModelViewSet):
        ...

A response whose body is one row carries its strong `ETag`; a GET/HEAD whose `If-None-Match`
matches answers 304; PUT, PATCH and DELETE need `If-Match` (428 without it, 400 when it is not
one, 412 when it is stale). The write is one `UPDATE … SET …, version = version + 1 WHERE pk = …
AND version = …`: the version the request's preconditions were evaluated on, so no other write
can slip between the check and the write.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import transaction
from django.db.models import F
from django.http import Http404
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from ustun.concurrency import conditional_read, failed, require_if_match
from ustun.django.models import Versioned
from ustun.django.problems import response_of
from ustun.errors import ProblemError
from ustun.http.preconditions import (
    PreconditionFailed,
    Preconditions,
    Validators,
    evaluate,
)

V = TypeVar("V", bound=Versioned)
_WRITES = frozenset({"PUT", "PATCH", "DELETE"})


class _NotModified(Exception):
    """The selected row is the one the client has (304); raised out of `get_object`."""

    def __init__(self, instance: Versioned) -> None:
        super().__init__("not modified")
        self.instance = instance


def _validators(instance: Versioned) -> Validators:
    return Validators(instance.etag)


class ConditionalMixin(GenericAPIView[V]):
    """Put it first in a DRF generic view's or viewset's bases, over a `Versioned` queryset.

    `get_object` evaluates the request's preconditions on the row it selects (after its 404 and
    permission checks); `perform_update` and `perform_destroy` write by compare-and-set. An
    override of `perform_update` keeps that by calling `self.conditional_save(serializer, …)`
    instead of `serializer.save(…)`.
    """

    _serializer: BaseSerializer[Any] | None = None

    def get_object(self) -> V:
        """The row, once the request's preconditions hold on it: 428 for a write without
        `If-Match`, 304 for a GET/HEAD the client has, 412 when a tag is stale."""
        instance = super().get_object()
        pre = self._preconditions()
        method = self._method()
        if method in _WRITES:
            require_if_match(pre)
        if conditional_read(method, pre, _validators(instance)):
            raise _NotModified(instance)
        return instance

    def get_serializer(self, *args: Any, **kwargs: Any) -> BaseSerializer[V]:
        """DRF's serializer, remembered so the response can carry its row's ETag."""
        self._serializer = serializer = super().get_serializer(*args, **kwargs)
        return serializer

    def perform_update(self, serializer: BaseSerializer[V]) -> None:
        """The validated changes, written by compare-and-set (`conditional_save`)."""
        self.conditional_save(serializer)

    def conditional_save(self, serializer: BaseSerializer[V], **values: Any) -> None:
        """`serializer.save(**values)` as a compare-and-set of the row's fields (foreign keys
        included; many-to-many fields cannot be written by an UPDATE), `auto_now` fields
        stamped; then the instance is re-read so the response shows what was written."""
        instance = serializer.instance
        if not isinstance(instance, Versioned):
            raise TypeError("conditional_save writes the one Versioned row the serializer holds")
        stamps = {
            field.name: field.pre_save(instance, add=False)
            for field in instance._meta.concrete_fields
            if getattr(field, "auto_now", False)
        }
        with transaction.atomic(using=instance._state.db):
            self._compare_and_set(instance, {**serializer.validated_data, **values, **stamps})
            instance.refresh_from_db()

    def perform_destroy(self, instance: V) -> None:
        """Bump the version by compare-and-set, then delete (cascades and signals as Django
        does them) in the same transaction, while the UPDATE's row lock holds it."""
        with transaction.atomic(using=instance._state.db):
            self._compare_and_set(instance, {})
            instance.delete()

    def _compare_and_set(self, instance: Versioned, values: dict[str, Any]) -> None:
        """`UPDATE … SET values, version = version + 1 WHERE pk AND version`, at the version the
        preconditions held on. When another write got there first, re-read the version and
        evaluate them again: a stale tag is 412, a gone row 404; one that still holds
        (`If-Match: *`, or a list naming the new version too) is tried again (each retry follows
        another request's committed write)."""
        rows = type(instance)._base_manager.using(instance._state.db).filter(pk=instance.pk)
        pre = self._preconditions()
        version = instance.version
        while not rows.filter(version=version).update(**values, version=F("version") + 1):
            current = rows.values_list("version", flat=True).first()
            if current is None:
                raise Http404
            instance.version = version = current
            outcome = evaluate(self._method(), pre, _validators(instance))
            if isinstance(outcome, PreconditionFailed):
                raise failed(pre, outcome.field)

    def _method(self) -> str:
        """The HTTP request's method: DRF's metadata (OPTIONS) calls `get_object` on a copy of
        the request whose method says PUT, which is no write to require If-Match of."""
        return self.request._request.method or ""

    def _preconditions(self) -> Preconditions:
        """The request's If-Match and If-None-Match (400 `precondition-invalid` for a malformed
        If-Match), parsed by ustun's HTTP layer as the service parses them."""
        return Preconditions.from_headers(self.request.headers.items())

    def handle_exception(self, exc: Exception) -> Response:
        """304 with the row's ETag; ustun's problems (400, 412, 428) as problem+json."""
        if isinstance(exc, _NotModified):
            return Response(status=304, headers={"ETag": str(exc.instance.etag)})
        if isinstance(exc, ProblemError):
            # DRF's dispatch takes any HttpResponse; the problem is not a DRF Response.
            return response_of(exc, self.request)  # type: ignore[return-value]
        return super().handle_exception(exc)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """A 2xx whose body is one `Versioned` row (retrieve, create, update) gets its ETag."""
        instance = None if self._serializer is None else self._serializer.instance
        if isinstance(instance, Versioned) and 200 <= response.status_code < 300:
            response.setdefault("ETag", str(instance.etag))
        return super().finalize_response(request, response, *args, **kwargs)
