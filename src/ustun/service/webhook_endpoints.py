"""`/v1/webhook-endpoints`: subscribe URLs to events, rotate secrets, test, recover."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator
from sqlalchemy import ColumnElement, Row, case, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock
from ustun.clock import rfc3339
from ustun.concurrency import (
    GuardRejected,
    Preconditions,
    Version,
    compare_and_delete,
    compare_and_set,
    validators,
)
from ustun.http.errors import ProblemError
from ustun.service.bodies import INTEGRAL_FLOAT
from ustun.service.conditional import Conditions, conditional_get
from ustun.service.deps import DB, DEFAULT_PAGE, CurrentAccount, Cursor, Limit
from ustun.service.pagination import page
from ustun.service.text import Text
from ustun.service.webhook_events import render_event
from ustun.service.webhook_runtime import AppSettings, Box
from ustun.store import Database, UnitOfWork
from ustun.webhooks import endpoints as ops
from ustun.webhooks import quotas, signing
from ustun.webhooks.addresses import url_refusal
from ustun.webhooks.outbox import PING, emit, wake
from ustun.webhooks.patterns import is_pattern
from ustun.webhooks.states import Change, Status, sources
from ustun.webhooks.tables import deliveries, endpoints, events

router = APIRouter(prefix="/v1/webhook-endpoints", tags=["webhooks"])
PATH = "/v1/webhook-endpoints"
# Answers that show a signing secret: no cache may keep them (RFC 9111 §5.2.2.5).
NO_STORE = "no-store"
DISABLED_BY_REQUEST = "disabled by request"

Events = Annotated[list[str], Field(min_length=1, max_length=100)]
InFlight = Annotated[StrictInt, Field(ge=1, le=256), INTEGRAL_FLOAT]


def _check_patterns(patterns: list[str] | None) -> list[str] | None:
    bad = [p for p in patterns or () if not is_pattern(p)]
    if bad:
        raise ValueError(f"not an event type or wildcard (`payment.*`, `*`): {bad[0]!r}")
    return patterns


class EndpointIn(BaseModel):
    """The body of `POST /v1/webhook-endpoints`."""

    model_config = ConfigDict(extra="forbid")

    url: Text = Field(max_length=2048)
    events: Events = Field(default_factory=lambda: ["*"])
    description: Text = Field(default="", max_length=500)
    payload: Literal["full", "thin"] = "full"
    rate_limit: float | None = Field(default=None, gt=0, le=10_000, description="Sends/s.")
    max_in_flight: InFlight = ops.DEFAULT_MAX_IN_FLIGHT
    signature: signing.Scheme = Field(
        default=signing.HMAC_SHA256,
        description="`hmac-sha256`: `v1` signatures under the `secret` in the answer; "
        "`ed25519`: `v1a` signatures, verified with the `public_key` in the answer.",
    )

    _patterns = field_validator("events")(_check_patterns)


class EndpointPatch(BaseModel):
    """The body of `PATCH /v1/webhook-endpoints/{id}`: only the fields to change."""

    model_config = ConfigDict(extra="forbid")

    url: Text | None = Field(default=None, max_length=2048)
    events: Events | None = None
    description: Text | None = Field(default=None, max_length=500)
    payload: Literal["full", "thin"] | None = None
    rate_limit: float | None = Field(default=None, gt=0, le=10_000)
    max_in_flight: InFlight | None = None
    enabled: bool | None = None

    _patterns = field_validator("events")(_check_patterns)


class RecoverIn(BaseModel):
    """The body of `POST …/recover`."""

    model_config = ConfigDict(extra="forbid")

    since: datetime


def render(row: Row[Any]) -> dict[str, Any]:
    """The public shape of an endpoint (never its secret)."""
    return {
        "id": row.id,
        "object": "webhook_endpoint",
        "url": row.url,
        "description": row.description,
        "events": json.loads(row.events),
        "payload": row.payload,
        "enabled": row.enabled,
        "disabled_reason": row.disabled_reason,
        "rate_limit": row.rate_limit,
        "max_in_flight": row.max_in_flight,
        "signature": row.signature,
        "public_key": row.public_key,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def _check_url(url: str, allow_private: bool) -> None:
    reason = url_refusal(url, allow_private=allow_private)
    if reason is not None:
        raise ProblemError(
            "validation-error",
            f"Invalid value in body.url: {reason}.",
            errors=[{"field": "body.url", "message": reason, "type": "url"}],
        )


async def _load(conn: AsyncConnection, account_id: str, endpoint_id: str) -> Row[Any]:
    row = (await conn.execute(select(endpoints).where(*_key(account_id, endpoint_id)))).first()
    if row is None:
        raise ProblemError("not-found", f"No webhook endpoint {endpoint_id}.")
    return row


def _key(account_id: str, endpoint_id: str) -> list[ColumnElement[bool]]:
    return [endpoints.c.id == endpoint_id, endpoints.c.account_id == account_id]


async def _change(
    uow: UnitOfWork,
    key: list[ColumnElement[bool]],
    pre: Preconditions,
    values: dict[str, Any],
    enabled: bool | None,
) -> Row[Any]:
    """A PATCH as one compare-and-set; disabling an enabled endpoint logs `endpoint.disabled`."""
    c = endpoints.c
    if enabled is True:
        # Re-enabling clears the failure streak; enabling an enabled endpoint keeps it.
        streak = case((c.enabled.is_(True), c.failing_since), else_=None)
        values |= {"enabled": True, "disabled_reason": None, "failing_since": streak}
    elif enabled is False:
        disabling = values | {"enabled": False, "disabled_reason": DISABLED_BY_REQUEST}
        try:
            row = await compare_and_set(
                uow.conn,
                endpoints,
                where=key,
                pre=pre,
                values=disabling,
                method="PATCH",
                guard=c.enabled.is_(True),
            )
        except GuardRejected:
            pass  # Already disabled: the rest of the change still applies, below.
        else:
            await ops.log_disabled(uow, row)
            return row
    return await compare_and_set(
        uow.conn, endpoints, where=key, pre=pre, values=values, method="PATCH"
    )


def _respond(response: Response, row: Row[Any]) -> dict[str, Any]:
    response.headers["etag"] = str(Version.of(row).etag)
    return render(row)


@router.post("", status_code=201)
async def create_endpoint(
    body: EndpointIn,
    account: CurrentAccount,
    db: DB,
    box: Box,
    settings: AppSettings,
    response: Response,
) -> dict[str, Any]:
    """Subscribe a URL; an HMAC signing `secret` is in this response and never again."""
    _check_url(body.url, settings.webhook_allow_private)
    async with db.unit_of_work() as uow:
        await quotas.reserve_endpoint(uow.conn, account.id, settings.max_endpoints)
        endpoint_id, secret = await ops.create(
            uow, box, account.id, **body.model_dump(exclude_none=True)
        )
        row = await _load(uow.conn, account.id, endpoint_id)
    response.headers["location"] = f"{PATH}/{endpoint_id}"
    response.headers["cache-control"] = NO_STORE
    return _respond(response, row) | signing.shown(secret)


@router.get("")
async def list_endpoints(
    account: CurrentAccount, db: DB, limit: Limit = DEFAULT_PAGE, cursor: Cursor = None
) -> dict[str, Any]:
    """The account's endpoints, newest first."""
    async with db.read() as conn:
        return await page(
            conn,
            endpoints,
            where=[endpoints.c.account_id == account.id],
            limit=limit,
            cursor=cursor,
            render=render,
        )


async def read_endpoint(db: Database, account_id: str, endpoint_id: str) -> Row[Any]:
    """One endpoint of the account; 404 when it has none by that id."""
    async with db.read() as conn:
        return await _load(conn, account_id, endpoint_id)


@router.get("/{endpoint_id}", response_model=None)
async def get_endpoint(
    endpoint_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """One endpoint with its `ETag`; 304 when If-None-Match matches."""
    row = await read_endpoint(db, account.id, endpoint_id)
    return conditional_get(request, pre, validators(row), render(row))


@router.patch("/{endpoint_id}")
async def update_endpoint(
    endpoint_id: str,
    body: EndpointPatch,
    account: CurrentAccount,
    db: DB,
    settings: AppSettings,
    response: Response,
    pre: Conditions,
) -> dict[str, Any]:
    """Change the URL, filters, payload, limits; `enabled: false` disables (and logs it)."""
    change = body.model_dump(exclude_unset=True)
    nulled = [name for name, value in change.items() if value is None and name != "rate_limit"]
    if nulled:
        raise ProblemError(
            "validation-error",
            f"Invalid value in body.{nulled[0]}: it cannot be null.",
            errors=[
                {"field": f"body.{n}", "message": "cannot be null", "type": "null"} for n in nulled
            ],
        )
    if change.get("url") is not None:
        _check_url(change["url"], settings.webhook_allow_private)
    enabled = change.pop("enabled", None)
    if "events" in change:
        change["events"] = json.dumps(change["events"])
    change["updated_at"] = clock.now()
    async with db.unit_of_work() as uow:
        row = await _change(uow, _key(account.id, endpoint_id), pre, change, enabled)
    return _respond(response, row)


@router.delete("/{endpoint_id}", status_code=204)
async def delete_endpoint(
    endpoint_id: str, account: CurrentAccount, db: DB, pre: Conditions
) -> Response:
    """Remove the endpoint and, by cascade, its deliveries (the events stay in the log)."""
    async with db.unit_of_work() as uow:
        await compare_and_delete(uow.conn, endpoints, where=_key(account.id, endpoint_id), pre=pre)
    return Response(status_code=204)


@router.post("/{endpoint_id}/rotate-secret")
async def rotate_secret(
    endpoint_id: str, account: CurrentAccount, db: DB, box: Box, response: Response
) -> dict[str, Any]:
    """A new secret (shown here once) or ed25519 key pair; the old one keeps signing for 24 h."""
    async with db.unit_of_work() as uow:
        secret = await ops.rotate(uow, box, await _load(uow.conn, account.id, endpoint_id))
        row = await _load(uow.conn, account.id, endpoint_id)
    response.headers["cache-control"] = NO_STORE
    return _respond(response, row) | signing.shown(secret)


@router.post("/{endpoint_id}/test", status_code=202)
async def send_test(
    endpoint_id: str, account: CurrentAccount, db: DB, settings: AppSettings
) -> dict[str, Any]:
    """Send a `ping` event to this endpoint alone, at most `test_pings_per_minute` a minute."""
    async with db.unit_of_work() as uow:
        row = await _load(uow.conn, account.id, endpoint_id)
        if not row.enabled:
            raise ProblemError("state-conflict", f"Webhook endpoint {endpoint_id} is disabled.")
        await quotas.reserve_ping(uow.conn, account.id, settings.test_pings_per_minute)
        event_id = await emit(
            uow, account.id, PING, {"endpoint_id": endpoint_id}, endpoint_id=endpoint_id
        )
        event = (await uow.conn.execute(select(events).where(events.c.id == event_id))).one()
    return render_event(event)


@router.post("/{endpoint_id}/recover", status_code=202)
async def recover(
    endpoint_id: str, body: RecoverIn, account: CurrentAccount, db: DB
) -> dict[str, Any]:
    """Re-send every failed or dead delivery of this endpoint created since `since`."""
    since = body.since if body.since.tzinfo else body.since.replace(tzinfo=clock.now().tzinfo)
    d = deliveries
    recoverable = [s.value for s in sources(Change.RESEND) if s in (Status.FAILED, Status.DEAD)]
    async with db.unit_of_work() as uow:
        row = await _load(uow.conn, account.id, endpoint_id)
        if not row.enabled:
            raise ProblemError("state-conflict", f"Webhook endpoint {endpoint_id} is disabled.")
        now = clock.now()
        result = await uow.conn.execute(
            update(d)
            .where(
                d.c.endpoint_id == endpoint_id, d.c.status.in_(recoverable), d.c.created_at >= since
            )
            .values(
                status=Status.PENDING.value, next_attempt_at=now, lease_token=None, updated_at=now
            )
        )
        await wake(uow)
    return {"object": "recovery", "endpoint_id": endpoint_id, "recovered": result.rowcount}
