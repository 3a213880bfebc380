"""`IdempotencyMiddleware`: ustun's refusals (a quota, a precondition) as problem+json, and
with tracing on (`ustun.tracing`) each request's server span."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from ustun import tracing
from ustun.django.problems import response_of
from ustun.errors import ProblemError

if TYPE_CHECKING:
    from opentelemetry.trace import Span

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


class IdempotencyMiddleware:
    """Answers a `ProblemError` a view raised (429 `quota-exceeded` from `enqueue`, say) with
    its problem+json; `@idempotent` views need it (`manage.py check` says when it is missing).
    With tracing on, opens each request's server span (or joins the app's own). Sync and
    async."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if not tracing.ENABLED:
            return self.get_response(request)
        if iscoroutinefunction(self.get_response):
            return self._traced(request)
        with tracing.wsgi_server(request.META) as span:
            response = self.get_response(request)
            assert isinstance(response, HttpResponseBase)
            _finish(span, request, response)
        return response

    async def _traced(self, request: HttpRequest) -> HttpResponseBase:
        with tracing.wsgi_server(request.META) as span:
            response = await cast(Awaitable[HttpResponseBase], self.get_response(request))
            _finish(span, request, response)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, ProblemError):
            return response_of(exception, request)
        return None


def _finish(span: Span | None, request: HttpRequest, response: HttpResponseBase) -> None:
    """Name the server span after the view's URL pattern (`payments/<int:pk>`)."""
    match = request.resolver_match
    route = f"/{match.route}" if match is not None and match.route else None
    tracing.finish(span, method=request.method or "", route=route, status=response.status_code)
