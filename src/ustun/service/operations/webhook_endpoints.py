"""`/v1/webhook-endpoints`: subscribe URLs to events, rotate secrets, test, recover."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict

from ustun import clock
from ustun.clock import rfc3339
from ustun.concurrency import Version
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.errors import ProblemError
from ustun.http.preconditions import Validators
from ustun.service.operations.webhook_deliveries import render as render_delivery
from ustun.service.operations.webhook_events import render_event
from ustun.service.plumbing.bodies import Moment
from ustun.service.plumbing.conditional import Conditions, conditional_get
from ustun.service.plumbing.deps import DB, AppSettings, Box, CurrentAccount, Cursor, Limit
from ustun.service.plumbing.portal_access import check_events
from ustun.store import Database
from ustun.webhooks import circuit, endpoint_auth, operations, signing
from ustun.webhooks.adapters import for_database
from ustun.webhooks.endpoint_body import EndpointIn, EndpointPatch
from ustun.webhooks.records import Delivery, Endpoint

router = APIRouter(prefix="/v1/webhook-endpoints", tags=["webhooks"])
PATH = "/v1/webhook-endpoints"
# The fields a PATCH may set to null: no rate limit, payload filter, certificate, OAuth2.
NULLABLE = ("rate_limit", "filter", "mtls", "oauth2")
# Answers that show a signing secret: no cache may keep them (RFC 9111 §5.2.2.5).
NO_STORE = "no-store"


class RecoverIn(BaseModel):
    """The body of `POST …/recover`."""

    model_config = ConfigDict(extra="forbid")

    since: Moment


def render(row: Endpoint) -> dict[str, Any]:
    """The public shape of an endpoint (never its secret, nor a broker URL's credentials)."""
    return {
        "id": row.id,
        "object": "webhook_endpoint",
        "kind": row.kind,
        "url": row.url,
        **{
            field: row.destination if row.kind == kind else None
            for kind, field in operations.DESTINATION_FIELD.items()
        },
        "description": row.description,
        "events": json.loads(row.events),
        "filter": None if row.filter is None else json.loads(row.filter),
        "payload": row.payload,
        "enabled": row.enabled,
        "disabled_reason": row.disabled_reason,
        "circuit": circuit.shown(row, clock.now()),
        "mtls": _mtls(row),
        "oauth2": None if row.oauth2 is None else json.loads(row.oauth2),
        "rate_limit": row.rate_limit,
        "max_in_flight": row.max_in_flight,
        "ordering": row.ordering,
        "signature": row.signature,
        "public_key": row.public_key,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def _mtls(row: Endpoint) -> dict[str, Any] | None:
    """What an endpoint shows of its client certificate: whose it is, until when."""
    if row.mtls_certificate is None:
        return None
    leaf = endpoint_auth.summary(row.mtls_certificate)
    return {
        "subject": leaf.subject,
        "not_after": rfc3339(leaf.not_after),
        "ca_bundle": row.mtls_ca_bundle is not None,
    }


def validators(row: Endpoint) -> Validators:
    """The endpoint's `ETag` (its version) and `Last-Modified` (its last change)."""
    return Validators(Version(row.version).etag, row.updated_at)


def _respond(response: Response, row: Endpoint) -> dict[str, Any]:
    response.headers["etag"] = str(Version(row.version).etag)
    return render(row)


@router.post("", status_code=201)
async def create_endpoint(
    body: EndpointIn,
    account: CurrentAccount,
    db: DB,
    box: Box,
    settings: AppSettings,
    request: Request,
    response: Response,
) -> dict[str, Any]:
    """Subscribe a URL or a broker destination; an HMAC signing `secret` is in this response
    and never again."""
    check_events(request, body.events)
    row, secret = await operations.create_endpoint(
        db,
        box,
        account.id,
        body.model_dump(exclude_none=True),
        max_endpoints=settings.max_endpoints,
        allow_private=settings.webhook_allow_private,
    )
    response.headers["location"] = f"{PATH}/{row.id}"
    response.headers["cache-control"] = NO_STORE
    return _respond(response, row) | signing.shown(secret)


@router.get("")
async def list_endpoints(
    account: CurrentAccount, db: DB, limit: Limit = DEFAULT_PAGE_SIZE, cursor: Cursor = None
) -> dict[str, Any]:
    """The account's endpoints, newest first."""
    return await endpoints_page(db, account.id, limit=limit, cursor=cursor)


async def endpoints_page(
    db: Database, account_id: str, *, limit: int, cursor: str | None
) -> dict[str, Any]:
    """A page of the account's endpoints, newest first (the API's list and the dashboard's)."""
    async with db.read() as conn:
        found = await for_database(db).endpoints_page(conn, account_id, limit=limit, cursor=cursor)
    return {"data": [render(row) for row in found.items], "next_cursor": found.next_cursor}


@router.get("/{endpoint_id}", response_model=None)
async def get_endpoint(
    endpoint_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """One endpoint with its `ETag`; 304 when If-None-Match matches."""
    row = await operations.read_endpoint(db, account.id, endpoint_id)
    return conditional_get(request, pre, validators(row), render(row))


@router.patch("/{endpoint_id}")
async def update_endpoint(
    endpoint_id: str,
    body: EndpointPatch,
    account: CurrentAccount,
    db: DB,
    box: Box,
    settings: AppSettings,
    request: Request,
    response: Response,
    pre: Conditions,
) -> dict[str, Any]:
    """Change the URL (exchange, subject), filters, payload, limits; `enabled: false`
    disables (and logs it); `filter`, `mtls` or `oauth2` null removes it."""
    change = body.model_dump(exclude_unset=True)
    check_events(request, change.get("events"))
    nulled = [n for n, value in change.items() if value is None and n not in NULLABLE]
    if nulled:
        raise ProblemError(
            "validation-error",
            f"Invalid value in body.{nulled[0]}: it cannot be null.",
            errors=[
                {"field": f"body.{n}", "message": "cannot be null", "type": "null"} for n in nulled
            ],
        )
    row = await operations.update_endpoint(
        db, box, account.id, endpoint_id, change, pre, allow_private=settings.webhook_allow_private
    )
    return _respond(response, row)


@router.delete("/{endpoint_id}", status_code=204)
async def delete_endpoint(
    endpoint_id: str, account: CurrentAccount, db: DB, pre: Conditions
) -> Response:
    """Remove the endpoint and, by cascade, its deliveries (the events stay in the log)."""
    await operations.delete_endpoint(db, account.id, endpoint_id, pre)
    return Response(status_code=204)


@router.post("/{endpoint_id}/rotate-secret")
async def rotate_secret(
    endpoint_id: str, account: CurrentAccount, db: DB, box: Box, response: Response
) -> dict[str, Any]:
    """A new secret (shown here once) or ed25519 key pair; the old one keeps signing for 24 h."""
    row, secret = await operations.rotate_secret(db, box, account.id, endpoint_id)
    response.headers["cache-control"] = NO_STORE
    return _respond(response, row) | signing.shown(secret)


@router.get("/{endpoint_id}/head")
async def endpoint_head(endpoint_id: str, account: CurrentAccount, db: DB) -> dict[str, Any]:
    """What a FIFO endpoint sends next or waits on: its oldest undelivered delivery, or null."""
    row, head = await operations.endpoint_head(db, account.id, endpoint_id)
    return render_head(row, head)


def render_head(row: Endpoint, head: Delivery | None) -> dict[str, Any]:
    """The answer of `GET …/head`, also shown on the dashboard's endpoint page."""
    return {
        "object": "endpoint_head",
        "endpoint_id": row.id,
        "ordering": row.ordering,
        "delivery": None if head is None else render_delivery(head),
    }


@router.post("/{endpoint_id}/test", status_code=202)
async def send_test(
    endpoint_id: str, account: CurrentAccount, db: DB, settings: AppSettings
) -> dict[str, Any]:
    """Send a `ping` event to this endpoint alone, at most `test_pings_per_minute` a minute."""
    event = await operations.send_test(
        db, account.id, endpoint_id, per_minute=settings.test_pings_per_minute
    )
    return render_event(event)


@router.post("/{endpoint_id}/recover", status_code=202)
async def recover(
    endpoint_id: str, body: RecoverIn, account: CurrentAccount, db: DB
) -> dict[str, Any]:
    """Re-send every failed or dead delivery of this endpoint created since `since`."""
    recovered = await operations.recover(db, account.id, endpoint_id, body.since)
    return {"object": "recovery", "endpoint_id": endpoint_id, "recovered": recovered}
