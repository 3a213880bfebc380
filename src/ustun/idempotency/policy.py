"""Per-route idempotency policy: `required`, `optional` or `off`.

Declare it on a FastAPI route with `openapi_extra=idempotency("required")`: the middleware reads
the marker from the route the request matches, and the OpenAPI document shows the header.
Routes without a marker get the middleware's default policy.
"""

from __future__ import annotations

from typing import Any, Literal

from starlette.types import Scope

from ustun.route_table import entries, matched

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


def route_policy(scope: Scope) -> Policy | None:
    """The policy of the route this request matches in the Starlette/FastAPI app at
    `scope["app"]`: its marker; None when unmarked; `off` when no route matches (a 404 or 405
    has no effect to protect). None too when the app has no router to look into.
    """
    router = getattr(scope.get("app"), "router", None)
    if getattr(router, "routes", None) is None:
        return None
    hit = matched(entries(router), scope)
    return "off" if hit is None else _marked(hit[0].route)


def _marked(route: Any) -> Policy | None:
    policy = (getattr(route, "openapi_extra", None) or {}).get(MARKER)
    return policy if policy in POLICIES else None
