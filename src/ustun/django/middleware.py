"""`IdempotencyMiddleware`: ustun's refusals (a quota, a precondition) as problem+json."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from ustun.django.problems import response_of
from ustun.errors import ProblemError

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


class IdempotencyMiddleware:
    """Answers a `ProblemError` a view raised (429 `quota-exceeded` from `enqueue`, say) with
    its problem+json; `@idempotent` views need it (`manage.py check` says when it is missing).
    Sync and async."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, ProblemError):
            return response_of(exception, request)
        return None
