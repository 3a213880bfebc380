"""Per-route idempotency policy: `required`, `optional` or `off`.

Declare it on a FastAPI route with `openapi_extra=idempotency("required")`: the middleware reads
the marker from the route the request matches, and the OpenAPI document shows the header.
Routes without a marker get the middleware's default policy.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, Literal, NamedTuple

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


class _Entry(NamedTuple):
    """A route, its path pattern and methods when it has them (else `route.matches` decides),
    and its policy."""

    route: Any
    regex: re.Pattern[str] | None
    methods: Collection[str] | None
    policy: Policy | None


def route_policy(scope: Scope) -> Policy | None:
    """The policy of the route this request matches in the Starlette/FastAPI app at
    `scope["app"]`: its marker; None when unmarked; `off` when no route matches (a 404 or 405
    has no effect to protect). None too when the app has no router to look into.
    """
    router = getattr(scope.get("app"), "router", None)
    routes = getattr(router, "routes", None)
    if routes is None:
        return None
    method, path = scope["method"], get_route_path(scope)
    for entry in _table(router, routes):
        if entry.regex is not None and entry.methods is not None:
            if method in entry.methods and entry.regex.match(path) is not None:
                return entry.policy
        elif entry.route.matches(scope)[0] is Match.FULL:
            return entry.policy
    return "off"


# Per router (by id, checked against a weak reference: routers are unhashable): how many routes
# it had, and every route opened up, so a request neither opens FastAPI's included routers nor
# reads each route's marker again.
_tables: dict[int, tuple[weakref.ref[Any], int, list[_Entry]]] = {}


def _table(router: Any, routes: Sequence[Any]) -> list[_Entry]:
    cached = _tables.get(id(router))
    if cached is None or cached[0]() is not router or cached[1] != len(routes):
        entries = [
            _Entry(
                route,
                getattr(route, "path_regex", None),
                getattr(route, "methods", None),
                _marked(route),
            )
            for route in _candidates(routes)
        ]
        cached = _tables[id(router)] = (weakref.ref(router), len(routes), entries)
    return cached[2]


def _marked(route: Any) -> Policy | None:
    policy = (getattr(route, "openapi_extra", None) or {}).get(MARKER)
    return policy if policy in POLICIES else None
