"""What a consumer portal token (`ustun.portal`) may do on the API: act as its session's account
on the webhook routes the portal uses, and nothing else.

`admission.Authenticator` accepts a `ptl_…` bearer token through `authenticate_portal` and refuses
(403 `forbidden`) any route `allows` does not list; the webhook routes narrow what they take
and show to the session's event types (`check_events`, `visible`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from starlette.requests import Request

from ustun import clock, portal
from ustun.errors import ProblemError
from ustun.service.plumbing.accounts import Account, Credential
from ustun.store import Database
from ustun.webhooks.catalog import EventType

_ID = r"[^/]+"
# (methods, path): what a portal token may call. Not DELETE of an endpoint (disable it: the
# app keeps its deliveries' history), not an event's expunge, no other resource.
ROUTES: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple(
    (frozenset(methods.split()), re.compile(f"^{path}$"))
    for methods, path in (
        ("GET HEAD POST", "/v1/webhook-endpoints"),
        ("GET HEAD PATCH", f"/v1/webhook-endpoints/{_ID}"),
        ("GET HEAD", f"/v1/webhook-endpoints/{_ID}/head"),
        ("POST", f"/v1/webhook-endpoints/{_ID}/(rotate-secret|test|recover)"),
        ("GET HEAD", f"/v1/deliveries(/{_ID})?"),
        ("POST", f"/v1/deliveries/{_ID}/retry"),
        ("GET HEAD", f"/v1/events(/{_ID})?"),
        ("GET HEAD", "/v1/event-types"),
    )
)
UNKNOWN = (
    "Unknown portal link: it may be mistyped or forged; ask the service that sent it for a new one."
)


def allows(method: str, path: str) -> bool:
    """Whether a portal token may call `method path`."""
    return any(method in methods and pattern.match(path) for methods, pattern in ROUTES)


async def authenticate_portal(db: Database, token: str) -> Credential | str:
    """The credential of a live portal token, else why it is refused (the 401's detail)."""
    session = await portal.find(db, token)
    if session is None:
        return UNKNOWN
    refusal = session.refusal(clock.now())
    if refusal is not None:
        return refusal
    return Credential(Account(session.account_id, session.account), session.id, portal=session)


def session_of(request: Request) -> portal.PortalSession | None:
    """The portal session this request authenticated with, or None (an API key)."""
    credential: Credential | None = request.scope.get("state", {}).get("credential")
    return None if credential is None else credential.portal


def check_events(request: Request, events: Sequence[str] | None) -> None:
    """Refuse (422) an endpoint filter that reaches past a portal session's event types: each
    entry must then be one of them, by name (no wildcards)."""
    session = session_of(request)
    if session is None or session.event_types is None or events is None:
        return
    for index, pattern in enumerate(events):
        if pattern not in session.event_types:
            allowed = ", ".join(session.event_types)
            message = (
                f"{pattern!r} is not an event type this portal link may subscribe to ({allowed})"
            )
            raise ProblemError(
                "validation-error",
                f"Invalid value in body.events.{index}: {message}.",
                errors=[{"field": f"body.events.{index}", "message": message, "type": "portal"}],
            )


def visible(request: Request, types: Iterable[EventType]) -> list[EventType]:
    """The catalogue's `types` a request may see: a portal session's event types only."""
    session = session_of(request)
    if session is None or session.event_types is None:
        return list(types)
    return [t for t in types if t.name in session.event_types]
