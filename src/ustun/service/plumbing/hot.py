"""Hot routes: endpoints that take the request, plus their path's parameters, and return a
`Response`. The router's entry calls them straight away, skipping FastAPI's routing pass, its
dependency solving and its response handling, which cost more than such an endpoint's own work.
Their errors still reach the app's exception handlers, and their routes stay in the OpenAPI
document."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ustun.route_table import Entry, entries, matched

Endpoint = Callable[..., Awaitable[Response]]
E = TypeVar("E", bound=Endpoint)

_MARK = "__ustun_hot__"


def hot(endpoint: E) -> E:
    """Mark `endpoint` hot: called as `endpoint(request=…, **path_params)`, each path parameter
    as its route's convertor gives it."""
    setattr(endpoint, _MARK, True)
    return endpoint


class HotRoutes:
    """The router's entry (`app.router.middleware_stack`, inside FastAPI's exception handling):
    a request whose route is hot goes to its endpoint, any other to the router."""

    def __init__(self, app: ASGIApp, router: Any) -> None:
        self.app = app
        self.router = router
        self._checked = _check(entries(router))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            table = entries(self.router)
            if table is not self._checked:  # routes were added since
                self._checked = _check(table)
            hit = matched(table, scope)
            if hit is not None and hit[1] is not None:
                entry = hit[0]
                endpoint = entry.route.endpoint
                if getattr(endpoint, _MARK, False):
                    convertors = entry.route.param_convertors
                    params = {k: convertors[k].convert(v) for k, v in hit[1].groupdict().items()}
                    scope["route"] = entry.original
                    scope["endpoint"] = endpoint
                    scope["path_params"] = params
                    response = await endpoint(request=Request(scope, receive, send), **params)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _check(table: list[Entry]) -> list[Entry]:
    """`table`, once each hot endpoint is found to take `request` and its route's path
    parameters only, and to have no dependency (its router's or the app's) that it would skip:
    a mistake fails as the app is made, not at a request."""
    for entry in table:
        endpoint = getattr(entry.route, "endpoint", None)
        if not getattr(endpoint, _MARK, False):
            continue
        assert endpoint is not None
        taken = set(inspect.signature(endpoint).parameters)
        path = set(entry.regex.groupindex) if entry.regex is not None else set()
        if entry.methods is None or taken != {"request", *path}:
            raise TypeError(
                f"hot endpoint {endpoint.__qualname__} must take `request` and its path's "
                f"parameters {sorted(path)} only, on a route with methods"
            )
        dependant = getattr(entry.route, "dependant", None)
        if dependant is not None and dependant.dependencies:
            raise TypeError(
                f"hot endpoint {endpoint.__qualname__} has dependencies (its own, its router's "
                "or the app's), which a hot route would skip: read them from the request"
            )
    return table
