"""Pure-ASGI middleware for the request methods of every route of the app.

- `HEAD` is answered wherever `GET` is, with the GET's headers and no body (RFC 9110 §9.3.2);
  FastAPI routes answer only the methods they declare.
- A `405` lists in `Allow` every method the target resource supports (RFC 9110 §15.5.6); the
  router builds it from the first route whose path matched, which names one method.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import anyio
from fastapi.routing import iter_route_contexts
from starlette.datastructures import MutableHeaders
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RouteMethods:
    """The methods the routes of an app declare for a path, across every router included."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self._routes = routes
        self._table: list[tuple[re.Pattern[str], frozenset[str]]] | None = None

    def declared(self, path: str) -> frozenset[str]:
        """Every method some route matching `path` declares (empty: no route has this path)."""
        if self._table is None:  # built on first use: routers are all included by then
            self._table = [
                (context.path_regex, frozenset(context.methods))
                for context in iter_route_contexts(self._routes)
                if context.methods and getattr(context, "path_regex", None) is not None
            ]
        return frozenset().union(*(methods for regex, methods in self._table if regex.match(path)))

    def allowed(self, path: str) -> frozenset[str]:
        """What `path` answers: its declared methods, and HEAD wherever GET is."""
        declared = self.declared(path)
        return declared | {"HEAD"} if "GET" in declared else declared


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path.removeprefix(root) if root and path.startswith(root) else path


class MethodsMiddleware:
    """Answer HEAD as GET without the body; give every 405 the complete `Allow` header."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.methods = RouteMethods(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)
        if scope["method"] == "HEAD":
            declared = self.methods.declared(path)
            if "GET" in declared:
                routed = scope if "HEAD" in declared else {**scope, "method": "GET"}
                await self._head(routed, receive, send)
                return

        async def send_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                MutableHeaders(scope=message)["allow"] = ", ".join(
                    sorted(self.methods.allowed(path))
                )
            await send(message)

        await self.app(scope, receive, send_allow)

    async def _head(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the response's start and an empty body, then stop the handler: its body is not
        wanted (an event stream would otherwise run on until its job ends)."""
        with anyio.CancelScope() as handler:

            async def send_headers(message: Message) -> None:
                if message["type"] == "http.response.start":
                    await send(message)
                    await send({"type": "http.response.body", "body": b""})
                    handler.cancel()

            await self.app(scope, receive, send_headers)
