"""The service's request plumbing in one pure-ASGI pass, instead of a stack of middlewares.

Each request, in this order: an id (`req_…`, echoed in `X-Request-Id`, bound to the log
context), its server span, a body over `max_body` refused (413), a NUL in the URL refused
(422), authentication (`Authenticator`), the account's request rate (`RequestRate`, 429) and
its requests in flight (`AccountSlots`), `HEAD` answered as `GET`, a JSON body of another
media type refused (415, `JsonBodies`); then the app. The answer's
start passes one hook that adds what each part owes it (`Allow` on a 405, the rate's fields,
fixed headers by path, the request id, `Date`) and frees the account's slot. A database
outage met anywhere before the answer starts is answered 503/507 with Retry-After. Each
request is timed, counted and logged once, by its route's template.

One pass costs one coroutine and one `send` hook per request; the stack it replaced cost one
of each per layer (eleven), for the same work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun import clock, ids, logs, tracing
from ustun.http.dates import format_http_date
from ustun.logs import ACCESS_LOGGER
from ustun.service.plumbing.admission import Authenticator, RequestRate
from ustun.service.plumbing.bodies import JsonBodies
from ustun.service.plumbing.body_limit import BodyTooLarge
from ustun.service.plumbing.in_flight import AccountSlots
from ustun.service.plumbing.methods import RouteMethods, route_path
from ustun.service.plumbing.metrics import Metrics
from ustun.service.plumbing.observe import RouteTemplates
from ustun.service.plumbing.problems import error_response, outage_response, problem_response
from ustun.service.plumbing.response_headers import PrefixHeaders
from ustun.store.engine import on_behalf_of
from ustun.store.reach import Outage, outage

access_log = logging.getLogger(ACCESS_LOGGER)
log = logging.getLogger("ustun.service")

Header = tuple[bytes, bytes]
REQUEST_ID_HEADER = b"x-request-id"


class HttpDate:
    """`Date` (RFC 9110 §6.6.1) read from the one clock as the answer starts, so after anything
    the request wrote: a `Last-Modified` it carries is never later than its `Date`
    (§8.8.2.1). Formatted once a second, as uvicorn formats its own (which `ustun serve`
    turns off: refreshed once a second, a 201 could say it was modified after it was sent)."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def __call__(self) -> bytes:
        moment = clock.now()
        second = int(moment.timestamp())
        if second != self._second:
            self._second, self._value = second, format_http_date(moment).encode()
        return self._value


class _Answer:
    """What the parts of one request owe its answer's start, and what they learn from it."""

    __slots__ = ("allow", "fields", "release", "started", "status")

    def __init__(self) -> None:
        self.status = 500
        self.started = False
        self.fields: Sequence[Header] = ()  # the request rate's
        self.allow: str | None = None  # the path whose methods a 405's `Allow` names
        self.release: Callable[[], None] | None = None  # the account's slot


class Plumbing:
    """Everything between the server and the app, once per request (see the module).

    `auth`, `rate` and `slots` apply under `prefix` (`rate`/`slots` None: no limit);
    `headers`: fixed headers by path prefix (`PrefixHeaders`); `router`: the app's, whose
    routes declare the methods of a path and the bodies read as JSON.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: Authenticator,
        metrics: Metrics,
        openapi: Callable[[], Mapping[str, Any]],
        router: Any,
        refused: Callable[[Outage], None],
        max_body: int,
        rate: RequestRate | None = None,
        slots: AccountSlots | None = None,
        prefix: str = "/v1/",
        headers: Sequence[PrefixHeaders] = (),
    ) -> None:
        self.app = app
        self.auth = auth
        self.metrics = metrics
        self.route_template = RouteTemplates(openapi)
        self.methods = RouteMethods(router)
        self.bodies = JsonBodies(router)
        self.refused = refused
        self.max_body = max_body
        self.rate = rate
        self.slots = slots
        self.prefix = prefix
        self.headers = headers
        self.date = HttpDate()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = ids.new_id("req")
        scope.setdefault("state", {})["request_id"] = request_id
        answer = _Answer()
        path = scope["path"]
        api = path.startswith(self.prefix)
        fixed = [rule for rule in self.headers if path.startswith(rule.prefix)]
        own = (REQUEST_ID_HEADER, request_id.encode())

        async def send_answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer.status = message["status"]
                answer.started = True
                if answer.release is not None:
                    answer.release()
                message["headers"] = self._headers(message, answer, fixed, own)
            await send(message)

        token = logs.bind_request_id(request_id)
        started = time.perf_counter()
        try:
            with tracing.server(scope["method"], scope["headers"]) as span:
                try:
                    await self._guarded(scope, receive, send_answer, answer, api)
                finally:
                    self._observe(scope, span, answer.status, time.perf_counter() - started)
        finally:
            logs.reset_request_id(token)

    def _headers(
        self, message: Message, answer: _Answer, fixed: list[PrefixHeaders], own: Header
    ) -> list[Header]:
        """The answer's headers with what each part adds: the fixed headers of its path, the
        rate's fields, and (replacing the app's) the request id, `Date` and a 405's `Allow`."""
        replaced = {own[0], b"date"}
        added = [own, (b"date", self.date())]
        if answer.allow is not None and answer.status == 405:
            replaced.add(b"allow")
            added.append((b"allow", ", ".join(sorted(self.methods.allowed(answer.allow))).encode()))
        headers = [h for h in message.get("headers", ()) if h[0].lower() not in replaced]
        for rule in fixed:
            headers = rule.apply(headers)
        headers += answer.fields
        headers += added
        return headers

    async def _guarded(
        self, scope: Scope, receive: Receive, send: Send, answer: _Answer, api: bool
    ) -> None:
        """The request's parts and the app, with a body over the limit and a database outage
        answered as problems when met before the answer started."""
        try:
            await self._limited(scope, receive, send, answer, api)
        except BodyTooLarge:
            if answer.started:
                raise
            await self._refuse(scope, receive, send, answer, self._too_large(scope))
        except Exception as exc:
            found = outage(exc)
            if found is None or answer.started:
                raise
            self.refused(found)
            log.warning(
                "%s %s refused: %s (%s: %s)",
                scope["method"],
                scope["path"],
                found.detail,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                extra={"request_id": scope["state"]["request_id"], "outage": found.kind},
            )
            await self._refuse(scope, receive, send, answer, outage_response(Request(scope), found))

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, answer: _Answer, response: Response
    ) -> None:
        """Send a refusal of the plumbing's own: none of the app's parts' headers apply."""
        answer.fields, answer.allow = (), None
        await response(scope, receive, send)

    def _too_large(self, scope: Scope) -> Response:
        refusal = BodyTooLarge(self.max_body)
        return problem_response(Request(scope), "payload-too-large", refusal.detail)

    async def _limited(
        self, scope: Scope, receive: Receive, send: Send, answer: _Answer, api: bool
    ) -> None:
        """Refuse a body over the limit (declared, or counted as it arrives) and a URL with a
        NUL; then authenticate under the prefix."""
        length = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if length.isdigit() and int(length) > self.max_body:
            await self._refuse(scope, receive, send, answer, self._too_large(scope))
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise BodyTooLarge(self.max_body)
            return message

        part = _nul_part(scope)
        if part is not None:
            refusal = problem_response(
                Request(scope),
                "validation-error",
                f"The {part} must not contain the NUL character (%00).",
                errors=[{"field": part, "message": "contains NUL (%00)", "type": "nul"}],
            )
            await self._refuse(scope, limited_receive, send, answer, refusal)
            return
        if not api:
            await self._routed(scope, limited_receive, send, answer)
            return
        checked = await self.auth.check(scope)
        if isinstance(checked, Response):
            await self._refuse(scope, limited_receive, send, answer, checked)
            return
        account_id = checked.account.id
        with on_behalf_of(account_id):  # a fair share of the write connections
            await self._admitted(scope, limited_receive, send, answer, account_id)

    async def _admitted(
        self, scope: Scope, receive: Receive, send: Send, answer: _Answer, account_id: str
    ) -> None:
        """An authenticated request: within its account's rate (else 429, running nothing),
        then within its account's requests in flight (else it waits its turn)."""
        if self.rate is not None:
            limited = self.rate.check(scope, account_id)
            if isinstance(limited, Response):
                await self._refuse(scope, receive, send, answer, limited)
                return
            answer.fields = limited
        slots = self.slots
        if slots is None:
            await self._routed(scope, receive, send, answer)
            return
        await slots.acquire(account_id)
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                slots.release(account_id)

        answer.release = release  # freed as the answer starts: a stream holds none
        try:
            await self._routed(scope, receive, send, answer)
        finally:
            release()

    async def _routed(self, scope: Scope, receive: Receive, send: Send, answer: _Answer) -> None:
        """The app; `HEAD` answered wherever `GET` is (RFC 9110 §9.3.2), a 405's `Allow`
        naming every method the resource supports (§15.5.6), a JSON body of another media type
        refused (415)."""
        path = route_path(scope)
        if scope["method"] == "HEAD":
            declared = self.methods.declared(path)
            if "GET" in declared:
                routed = scope if "HEAD" in declared else {**scope, "method": "GET"}
                await _head(self.app, routed, receive, send)
                return
        answer.allow = path
        refused = self.bodies.refusal(scope, path)
        if refused is not None:
            await self._refuse(
                scope, receive, send, answer, error_response(Request(scope), refused)
            )
            return
        await self.app(scope, receive, send)

    def _observe(self, scope: Scope, span: Any, status: int, seconds: float) -> None:
        """Count, time and log the request by its route's template; name its span."""
        route = self.route_template(scope)
        method = scope["method"]
        tracing.finish(span, method=method, route=route, status=status)
        self.metrics.observe_http(method, route, status, seconds)
        access_log.info(
            "%s %s %d",
            method,
            scope["path"],
            status,
            extra={
                "request_id": scope["state"]["request_id"],
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )


async def _head(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Send the GET's start and an empty body, then stop the handler: its body is not wanted
    (an event stream would otherwise run on until its job ends)."""
    with anyio.CancelScope() as handler:

        async def send_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b""})
                handler.cancel()

        await app(scope, receive, send_headers)


def _nul_part(scope: Scope) -> str | None:
    """Which part of the URL holds a NUL character, if one does: PostgreSQL cannot compare text
    with NUL in it, so such an id or filter would fail in the database as a 500."""
    if "\x00" in scope["path"]:
        return "path"
    if b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
        return "query"
    return None
