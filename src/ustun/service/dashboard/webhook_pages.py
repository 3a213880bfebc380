"""Dashboard pages of the webhooks pillar: endpoints, events, deliveries.

Every action is a webhooks operation (`ustun.webhooks.operations`, which the HTTP API runs too)
and every listing the API's own read handler, called with the logged-in account; nothing here
re-implements their SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError

from ustun.defaults import DEFAULT_ENDPOINT_MAX_IN_FLIGHT, DEFAULT_PAGE_SIZE
from ustun.errors import PreconditionFailedError, ProblemError
from ustun.http.dates import parse_rfc3339
from ustun.http.etag import EntityTagMatch
from ustun.http.preconditions import Preconditions
from ustun.service.dashboard.web import LoggedIn, Posting, Viewer, page, see_other
from ustun.service.operations import webhook_deliveries, webhook_endpoints, webhook_events
from ustun.service.plumbing.deps import MAX_PAGE
from ustun.webhooks import endpoint_body, operations, signing
from ustun.webhooks.endpoint_body import field_message
from ustun.webhooks.endpoints import (
    MAX_RATE_LIMIT,
    MIN_RATE_LIMIT,
    UNORDERED,
    Ordering,
)
from ustun.webhooks.states import Status

router = APIRouter(prefix="/dashboard", include_in_schema=False)

Cursor = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_]+$")]
Filter = Annotated[str | None, Query(max_length=100)]

# Short messages shown after an action (`?done=…` on the page the action redirects to).
DONE = {
    "enabled": "Endpoint enabled.",
    "disabled": "Endpoint disabled.",
    "tested": "Test event sent.",
    "retried": "Delivery queued for another attempt now.",
}


def _flashes(done: str | None) -> list[str]:
    return [DONE[done]] if done in DONE else []


def _status(value: str | None) -> Status | None:
    try:
        return Status(value) if value else None
    except ValueError:
        return None


def _problem_text(exc: ProblemError | ValidationError) -> str:
    """What the form shows for a refusal: the problem's detail, or each field's message (a
    message about the whole endpoint stands alone)."""
    if isinstance(exc, ProblemError):
        return exc.detail
    return "; ".join(_error_text(err) for err in exc.errors())


def _error_text(err: Mapping[str, Any]) -> str:
    field = ".".join(str(part) for part in err["loc"])
    return f"{field}: {field_message(err)}" if field else field_message(err)


def _db(request: Request) -> Any:
    return request.app.state.db


async def _endpoints_page(
    request: Request,
    who: Viewer,
    cursor: str | None = None,
    *,
    created: dict[str, Any] | None = None,
    error: str | None = None,
    done: str | None = None,
) -> Response:
    listing = await webhook_endpoints.endpoints_page(
        _db(request), who.account.id, limit=DEFAULT_PAGE_SIZE, cursor=cursor
    )
    return page(
        request,
        "endpoints.html",
        who,
        nav="endpoints",
        endpoints=listing,
        kinds=get_args(endpoint_body.Kind),
        schemes=signing.SCHEMES,
        orderings=get_args(Ordering),
        default_in_flight=DEFAULT_ENDPOINT_MAX_IN_FLIGHT,
        rate_limits=f"{MIN_RATE_LIMIT:g} to {MAX_RATE_LIMIT:g}",
        created=created,
        error=error,
        flashes=_flashes(done),
    )


@router.get("/endpoints")
async def endpoints(
    request: Request, who: LoggedIn, cursor: Cursor = None, done: Filter = None
) -> Response:
    """The account's webhook endpoints and a form to add one."""
    return await _endpoints_page(request, who, cursor, done=done)


def _destination(kind: str, name: str) -> dict[str, str]:
    """The form's "exchange or subject" as the API body's field: `exchange` for a rabbitmq
    endpoint, `subject` for a nats one; no other kind takes it."""
    if not name:
        return {}
    field = operations.DESTINATION_FIELD.get(kind)
    if field is None:
        raise ProblemError(
            "validation-error",
            "Only a rabbitmq endpoint (its exchange) or a nats endpoint (its subject) takes an "
            "exchange or subject: leave that field empty.",
        )
    return {field: name}


def _numbers(**fields: str) -> dict[str, object]:
    """The form's number fields as the API's JSON body would carry them (`8`, `2.5`), so the API's
    model refuses what it would refuse there, with its message; text that is no JSON number
    stays text (refused as such); an empty field is left out (the API's default)."""
    numbers: dict[str, object] = {}
    for name, text in fields.items():
        if text.strip():
            try:
                numbers[name] = json.loads(text)
            except ValueError:
                numbers[name] = text
    return numbers


@router.post("/endpoints")
async def create_endpoint(
    request: Request,
    who: Posting,
    url: Annotated[str, Form(max_length=2048)],
    kind: Annotated[str, Form(max_length=16)] = "http",
    destination: Annotated[str, Form(max_length=255)] = "",
    events: Annotated[str, Form(max_length=2000)] = "*",
    description: Annotated[str, Form(max_length=500)] = "",
    payload: Annotated[str, Form(max_length=8)] = "full",
    signature: Annotated[str, Form(max_length=16)] = signing.HMAC_SHA256,
    ordering: Annotated[str, Form(max_length=16)] = UNORDERED,
    max_in_flight: Annotated[str, Form(max_length=40)] = "",
    rate_limit: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    """Create an endpoint (HTTP or broker, with its ordering, window and rate limit, as the API's
    body) and show its signing secret this once, or its public key."""
    patterns = [p.strip() for p in events.replace(",", " ").split() if p.strip()] or ["*"]
    try:
        body = endpoint_body.EndpointIn.model_validate(
            {
                "kind": kind,
                "url": url.strip(),
                **_destination(kind, destination.strip()),
                "events": patterns,
                "description": description,
                "payload": payload,
                "signature": signature,
                "ordering": ordering,
                **_numbers(max_in_flight=max_in_flight, rate_limit=rate_limit),
            }
        )
        settings = request.app.state.settings
        row, secret = await operations.create_endpoint(
            _db(request),
            request.app.state.secret_box,
            who.account.id,
            body.model_dump(exclude_none=True),
            max_endpoints=settings.max_endpoints,
            allow_private=settings.webhook_allow_private,
        )
    except (ProblemError, ValidationError) as exc:
        return await _endpoints_page(request, who, error=_problem_text(exc))
    created = webhook_endpoints.render(row) | signing.shown(secret)
    shown = await _endpoints_page(request, who, created=created)
    shown.headers["cache-control"] = webhook_endpoints.NO_STORE
    return shown


async def _endpoint_page(
    request: Request,
    who: Viewer,
    endpoint_id: str,
    *,
    secret: str | None = None,
    error: str | None = None,
    done: str | None = None,
    recovered: int | None = None,
) -> Response:
    db = _db(request)
    row, head = await operations.endpoint_head(db, who.account.id, endpoint_id)
    recent = await webhook_deliveries.deliveries_page(
        db, who.account.id, limit=DEFAULT_PAGE_SIZE, cursor=None, endpoint_id=endpoint_id
    )
    flashes = _flashes(done)
    if recovered is not None:
        flashes.append(f"{recovered} failed or dead deliveries queued again.")
    return page(
        request,
        "endpoint.html",
        who,
        nav="endpoints",
        endpoint=webhook_endpoints.render(row),
        head=webhook_endpoints.render_head(row, head)["delivery"],
        etag=str(webhook_endpoints.validators(row).etag),
        deliveries=recent,
        secret=secret,
        error=error,
        flashes=flashes,
    )


@router.get("/endpoints/{endpoint_id}")
async def endpoint(
    request: Request, who: LoggedIn, endpoint_id: str, done: Filter = None
) -> Response:
    """One endpoint: its settings, actions and latest deliveries."""
    return await _endpoint_page(request, who, endpoint_id, done=done)


@router.post("/endpoints/{endpoint_id}/enabled")
async def set_enabled(
    request: Request,
    who: Posting,
    endpoint_id: str,
    enabled: Annotated[str, Form(pattern="^(true|false)$")],
    etag: Annotated[str, Form(max_length=100)],
) -> Response:
    """Enable or disable an endpoint, if it is still as the page showed it (its `etag`)."""
    enabling = enabled == "true"
    try:
        await operations.update_endpoint(
            _db(request),
            request.app.state.secret_box,
            who.account.id,
            endpoint_id,
            {"enabled": enabling},
            Preconditions(if_match=EntityTagMatch.parse(etag)),
            allow_private=request.app.state.settings.webhook_allow_private,
        )
    except PreconditionFailedError:
        stale = "The endpoint changed since this page was loaded; here it is as it is now."
        return await _endpoint_page(request, who, endpoint_id, error=stale)
    done = "enabled" if enabling else "disabled"
    return see_other(f"/dashboard/endpoints/{endpoint_id}?done={done}")


@router.post("/endpoints/{endpoint_id}/rotate")
async def rotate(request: Request, who: Posting, endpoint_id: str) -> Response:
    """Rotate the signing key and show a new HMAC secret, this once (an ed25519 endpoint's new
    public key is on the page)."""
    _, key = await operations.rotate_secret(
        _db(request), request.app.state.secret_box, who.account.id, endpoint_id
    )
    shown = await _endpoint_page(request, who, endpoint_id, secret=signing.shown(key)["secret"])
    shown.headers["cache-control"] = webhook_endpoints.NO_STORE
    return shown


@router.post("/endpoints/{endpoint_id}/test")
async def send_test(request: Request, who: Posting, endpoint_id: str) -> Response:
    """Send a `ping` event to the endpoint."""
    try:
        await operations.send_test(
            _db(request),
            who.account.id,
            endpoint_id,
            per_minute=request.app.state.settings.test_pings_per_minute,
        )
    except ProblemError as exc:
        return await _endpoint_page(request, who, endpoint_id, error=exc.detail)
    return see_other(f"/dashboard/endpoints/{endpoint_id}?done=tested")


@router.post("/endpoints/{endpoint_id}/recover")
async def recover(
    request: Request,
    who: Posting,
    endpoint_id: str,
    since: Annotated[str, Form(max_length=40)],
) -> Response:
    """Re-send every failed or dead delivery of the endpoint since a moment (UTC)."""
    try:
        moment = parse_rfc3339(since, local_as_utc=True)
    except ValueError as exc:
        error = f"Not a time: {since!r} ({exc})."
        return await _endpoint_page(request, who, endpoint_id, error=error)
    try:
        recovered = await operations.recover(_db(request), who.account.id, endpoint_id, moment)
    except ProblemError as exc:
        return await _endpoint_page(request, who, endpoint_id, error=exc.detail)
    return await _endpoint_page(request, who, endpoint_id, recovered=recovered)


@router.get("/events")
async def events(
    request: Request, who: LoggedIn, type: Filter = None, cursor: Cursor = None
) -> Response:
    """The account's event log, newest first, optionally of one type."""
    listing = await webhook_events.events_page(
        _db(request), who.account.id, limit=DEFAULT_PAGE_SIZE, cursor=cursor, type=type or None
    )
    types = [t.name for t in request.app.state.event_types]
    return page(
        request, "events.html", who, nav="events", events=listing, types=types, type=type or ""
    )


@router.get("/events/{event_id}")
async def event(request: Request, who: LoggedIn, event_id: str) -> Response:
    """One event with its exact payload and its deliveries."""
    db = _db(request)
    found = await webhook_events.read_event(db, who.account.id, event_id)
    sent = await webhook_deliveries.deliveries_page(
        db, who.account.id, limit=DEFAULT_PAGE_SIZE, cursor=None, event_id=event_id
    )
    payload = json.dumps(
        {k: v for k, v in found.items() if k != "object"}, indent=2, ensure_ascii=False
    )
    return page(
        request,
        "event.html",
        who,
        nav="events",
        event=found,
        payload=payload,
        deliveries=sent,
    )


@router.get("/deliveries")
async def deliveries(
    request: Request,
    who: LoggedIn,
    endpoint_id: Cursor = None,
    status: Filter = None,
    cursor: Cursor = None,
) -> Response:
    """The account's deliveries, filtered by endpoint (chosen from a list) and status."""
    db = _db(request)
    choices = await webhook_endpoints.endpoints_page(
        db, who.account.id, limit=MAX_PAGE, cursor=None
    )
    listing = await webhook_deliveries.deliveries_page(
        db,
        who.account.id,
        limit=DEFAULT_PAGE_SIZE,
        cursor=cursor,
        endpoint_id=endpoint_id or None,
        status=_status(status),
    )
    return page(
        request,
        "deliveries.html",
        who,
        nav="deliveries",
        deliveries=listing,
        endpoints=choices["data"],
        statuses=[s.value for s in Status],
        status=status or "",
        endpoint_id=endpoint_id or "",
    )


async def _delivery_page(
    request: Request,
    who: Viewer,
    delivery_id: str,
    *,
    done: str | None = None,
    error: str | None = None,
) -> Response:
    found = await webhook_deliveries.delivery_with_attempts(
        _db(request), who.account.id, delivery_id
    )
    return page(
        request,
        "delivery.html",
        who,
        nav="deliveries",
        delivery=found,
        flashes=_flashes(done),
        error=error,
    )


@router.get("/deliveries/{delivery_id}")
async def delivery(
    request: Request, who: LoggedIn, delivery_id: str, done: Filter = None
) -> Response:
    """One delivery with its attempts timeline and a Retry button."""
    return await _delivery_page(request, who, delivery_id, done=done)


@router.post("/deliveries/{delivery_id}/retry")
async def retry(request: Request, who: Posting, delivery_id: str) -> Response:
    """Send the delivery again now."""
    try:
        await operations.retry_delivery(_db(request), who.account.id, delivery_id)
    except ProblemError as exc:
        return await _delivery_page(request, who, delivery_id, error=exc.detail)
    return see_other(f"/dashboard/deliveries/{delivery_id}?done=retried")
