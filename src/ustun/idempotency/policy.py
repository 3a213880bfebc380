"""Per-route idempotency policy: `required`, `optional` or `off`.

Declare it on a FastAPI route with `openapi_extra=idempotency("required")`: the middleware reads
the marker from the route the request matches, and the OpenAPI document shows the header.
Routes without a marker get the middleware's default policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

from starlette._utils import get_route_path
from starlette.routing import Match
from starlette.types import Scope

Policy = Literal["required", "optional", "off"]
POLICIES: tuple[Policy, ...] = ("required", "optional", "off")
MARKER = "x-idempotency"


def idempotency(policy: Policy) -> dict[str, Any]:
    """`openapi_extra` for a route: its policy, plus the documented `Idempotency-Key` header."""
    if policy not in POLICIES:
        raise ValueError(f"idempotency policy must be one of {POLICIES}, not {policy!r}")
    extra: dict[str, Any] = {MARKER: policy}
    if policy != "off":
        extra["parameters"] = [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": policy == "required",
                "description": "A unique value (a UUIDv4 is ideal) reused unchanged on every "
                "retry of this operation, so that it takes effect at most once.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            }
        ]
    return extra


def _candidates(routes: Iterable[Any]) -> Iterator[Any]:
    """Every route, with FastAPI's lazily included routers opened up into their own routes."""
    for route in routes:
        opened = getattr(route, "effective_route_contexts", None)
        if callable(opened):
            yield from opened()
        else:
            yield route


def _matches(route: Any, scope: Scope) -> bool:
    regex, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
    if regex is not None and methods is not None:
        return scope["method"] in methods and regex.match(get_route_path(scope)) is not None
    match, _ = route.matches(scope)
    return bool(match is Match.FULL)


def route_policy(scope: Scope) -> Policy | None:
    """The policy of the route this request matches in the Starlette/FastAPI app at
    `scope["app"]`: its marker; None when unmarked; `off` when no route matches (a 404 or 405
    has no effect to protect). None too when the app has no router to look into.
    """
    router = getattr(scope.get("app"), "router", None)
    routes = getattr(router, "routes", None)
    if routes is None:
        return None
    for route in _candidates(routes):
        if _matches(route, scope):
            extra = getattr(route, "openapi_extra", None) or {}
            policy = extra.get(MARKER)
            return policy if policy in POLICIES else None
    return "off"
