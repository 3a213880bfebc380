"""Pure-ASGI middleware that times every request, counts it, writes one access-log line and,
with tracing on (`ustun.tracing`), opens its server span.

Requests are labelled by the matched route's path template (`/v1/payments/{id}`), never the
raw path, so the number of label values stays bounded whatever URLs clients send.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun import tracing
from ustun.logs import ACCESS_LOGGER
from ustun.service.plumbing.metrics import Metrics

log = logging.getLogger(ACCESS_LOGGER)

UNMATCHED = "<unmatched>"


class RouteTemplates:
    """Find the route template of a request, also when middleware answered before routing."""

    def __init__(self, openapi: Callable[[], Mapping[str, Any]]) -> None:
        self._openapi = openapi
        self._compiled: list[tuple[re.Pattern[str], str]] | None = None

    def _documented(self, path: str) -> str:
        if self._compiled is None:
            self._compiled = [(compile_path(t)[0], t) for t in self._openapi().get("paths", {})]
        return next((t for regex, t in self._compiled if regex.match(path)), UNMATCHED)

    def __call__(self, scope: Scope) -> str:
        """The template of the route that handled `scope`, else of the documented path it hits."""
        path = getattr(scope.get("route"), "path", None)
        return path if isinstance(path, str) else self._documented(scope["path"])


class ObserveMiddleware:
    """Record method, route template, status and latency of every HTTP request; trace it."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, openapi: Callable[[], Mapping[str, Any]]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.route_template = RouteTemplates(openapi)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with tracing.server(scope["method"], scope["headers"]) as span:
            try:
                await self.app(scope, receive, send_observed)
            finally:
                seconds = time.perf_counter() - started
                route = self.route_template(scope)
                tracing.finish(span, method=scope["method"], route=route, status=status)
                self.metrics.observe_http(scope["method"], route, status, seconds)
                log.info(
                    "%s %s %d",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={
                        "request_id": scope.get("state", {}).get("request_id"),
                        "route": route,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 2),
                    },
                )
