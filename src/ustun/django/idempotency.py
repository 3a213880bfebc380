"""`@idempotent`: a Django or DRF view run once per `Idempotency-Key`, its ORM writes, events
and jobs committed in one `transaction.atomic` with its stored answer (`ustun.idempotency.hosted`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.module_loading import import_string

from ustun.django import conf
from ustun.django.db import host_connection
from ustun.django.problems import problem_response
from ustun.idempotency.decision import Refuse, key_of
from ustun.idempotency.hosted import HostedKeys, Replayed
from ustun.idempotency.middleware import REPLAY_HEADERS
from ustun.idempotency.records import StoredResponse
from ustun.keys import hosted_keys
from ustun.settings import Settings

Policy = Literal["required", "optional"]
View = TypeVar("View", bound=Callable[..., Any])
REPLAYED_HEADER = "Idempotent-Replayed"


def default_scope(request: HttpRequest) -> str:
    """The key scope of a request: its user's primary key ("" for an anonymous one)."""
    user = getattr(request, "user", None)
    return "" if user is None or not user.is_authenticated else str(user.pk)


def scope_of(request: HttpRequest) -> str:
    """`USTUN["IDEMPOTENCY_SCOPE"]`'s function of the request, else `default_scope`."""
    path = conf.options().get("IDEMPOTENCY_SCOPE")
    scope: Callable[[HttpRequest], str] = import_string(path) if path else default_scope
    return str(scope(request))


# Per alias: the settings `_keys` built from, and the keys built.
_BUILT: dict[str, tuple[Settings, HostedKeys]] = {}


def _keys() -> HostedKeys:
    """The idempotency keys of ustun's database: made once per settings object (`conf` makes a
    new one when Django's settings change), not per request (HKDF and the AEAD's set-up cost
    60-100 µs)."""
    using = conf.alias()
    settings = conf.ustun_settings(using)
    built = _BUILT.get(using)
    if built is not None and built[0] is settings:
        return built[1]
    keys = hosted_keys(
        settings,
        connection=lambda: host_connection(using),
        atomic=lambda: transaction.atomic(using=using),
    )
    _BUILT[using] = (settings, keys)
    return keys


def _stored(response: HttpResponseBase) -> StoredResponse:
    """What a replay sends again of `response`: status, the replayed headers, the body."""
    body = response.content if isinstance(response, HttpResponse) else None
    headers = tuple((n, v) for n, v in response.items() if n.lower() in REPLAY_HEADERS)
    return StoredResponse(response.status_code, headers, body)


def _rendered(view_self: Any, request: Any, response: Any) -> HttpResponseBase:
    """A DRF `Response` is rendered by `dispatch` after the view returns: render it here, as
    DRF would, so that its body can be stored with the transaction."""
    if hasattr(response, "render") and not getattr(response, "is_rendered", True):
        # A DRF function view (`@api_view`) is a method of the view its request names.
        view_self = view_self or getattr(request, "parser_context", {}).get("view")
        finalize = getattr(view_self, "finalize_response", None)
        if finalize is not None and not hasattr(response, "accepted_renderer"):
            response = finalize(request, response)
        response.render()
    return response  # type: ignore[no-any-return]


def _answer(answer: Replayed | Refuse, request: HttpRequest) -> HttpResponse:
    if isinstance(answer, Refuse):
        return problem_response(
            answer.slug, answer.detail, request, answer.headers, answer.extensions
        )
    replay = HttpResponse(answer.body, status=answer.response.status)
    for name, value in answer.response.headers:
        replay[name] = value
    replay[REPLAYED_HEADER] = "true"
    return replay


def _call(policy: Policy, request: Any, run: Callable[[], Any], view_self: Any) -> Any:
    raw: HttpRequest = getattr(request, "_request", request)  # DRF's Request wraps Django's
    header = raw.headers.get("Idempotency-Key")
    key = key_of(
        [] if header is None else [header],
        required=policy == "required",
        method=raw.method or "",
        path=raw.path,
    )
    if isinstance(key, Refuse):
        return _answer(key, raw)
    hosted = _keys()
    if key is None:
        with transaction.atomic(using=conf.alias()):
            return run()
    keyed = hosted.request(
        scope_of(request),
        key,
        method=raw.method or "",
        path=raw.path,
        query=raw.META.get("QUERY_STRING", "").encode("latin-1"),
        body=raw.body,
    )
    result = hosted.call(keyed, lambda: _rendered(view_self, request, run()), _stored)
    if isinstance(result, (Replayed, Refuse)):
        return _answer(result, raw)
    return result


def idempotent(policy: Policy = "optional") -> Callable[[View], View]:
    """Run the view once per `Idempotency-Key` (`"required"`: refuse a request without one);
    on a function view, a class-based view's method or a DRF view or viewset action."""

    def decorate(view: View) -> View:
        method = _is_method(view)
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                request = args[1] if method else args[0]
                view_self = args[0] if method else None
                run = lambda: async_to_sync(view)(*args, **kwargs)  # noqa: E731
                return await sync_to_async(_call)(policy, request, run, view_self)

            return run_async  # type: ignore[return-value]

        @functools.wraps(view)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            request = args[1] if method else args[0]
            view_self = args[0] if method else None
            return _call(policy, request, lambda: view(*args, **kwargs), view_self)

        return run_sync  # type: ignore[return-value]

    return decorate


def _is_method(view: Callable[..., Any]) -> bool:
    """Whether `view` is a method (its first parameter `self`), so the request comes second."""
    code = getattr(view, "__code__", None)
    return code is not None and code.co_argcount > 0 and code.co_varnames[0] == "self"
