"""The request methods of every route of the app, for the plumbing (`pipeline.Plumbing`):

- `HEAD` is answered wherever `GET` is, with the GET's headers and no body (RFC 9110 §9.3.2);
  FastAPI routes answer only the methods they declare.
- A `405` lists in `Allow` every method the target resource supports (RFC 9110 §15.5.6); the
  router builds it from the first route whose path matched, which names one method.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope

from ustun.route_table import entries


class RouteMethods:
    """The methods the routes of an app's router declare for a path, across every router
    included (`route_table`: the table the idempotency policy and the hot routes read)."""

    def __init__(self, router: Any) -> None:
        self._router = router

    def declared(self, path: str) -> frozenset[str]:
        """Every method some route matching `path` declares (empty: no route has this path)."""
        return frozenset().union(
            *(
                entry.methods
                for entry in entries(self._router)
                if entry.methods and entry.regex is not None and entry.regex.match(path)
            )
        )

    def allowed(self, path: str) -> frozenset[str]:
        """What `path` answers: its declared methods, and HEAD wherever GET is."""
        declared = self.declared(path)
        return declared | {"HEAD"} if "GET" in declared else declared


def route_path(scope: Scope) -> str:
    """The path the app routes: the request's, less the app's `root_path`."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path.removeprefix(root) if root and path.startswith(root) else path
