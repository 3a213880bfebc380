"""The route template a request is observed under (`pipeline.Plumbing` times every request,
counts it, writes one access-log line and, with tracing on, opens its server span).

Requests are labelled by the matched route's path template (`/v1/payments/{id}`), never the
raw path, so the number of label values stays bounded whatever URLs clients send.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from starlette.routing import compile_path
from starlette.types import Scope

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
