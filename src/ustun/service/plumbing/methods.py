"""The request methods of every route of the app, for the plumbing (`pipeline.Plumbing`):

- `HEAD` is answered wherever `GET` is, with the GET's headers and no body (RFC 9110 §9.3.2);
  FastAPI routes answer only the methods they declare.
- A `405` lists in `Allow` every method the target resource supports (RFC 9110 §15.5.6); the
  router builds it from the first route whose path matched, which names one method.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute
from starlette.types import Scope


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


def route_path(scope: Scope) -> str:
    """The path the app routes: the request's, less the app's `root_path`."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path.removeprefix(root) if root and path.startswith(root) else path
