"""`/v1/portal-sessions`: an operator opens (and revokes) a consumer portal link for one account.

Only an operator key (`ustun keys create --operator`) may call these routes, for any account;
any other key is refused 403 `forbidden`. The link's token is in the creation's answer only
(sent `no-store`); the session is stored under its hash (`ustun.portal`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ustun import portal
from ustun.clock import rfc3339, rfc3339_or_none
from ustun.errors import ProblemError
from ustun.idempotency import idempotency
from ustun.idempotency.sealing import CACHE_CONTROL, NO_STORE
from ustun.service.plumbing.accounts import Credential, is_operator
from ustun.service.plumbing.deps import DB, AppSettings
from ustun.service.plumbing.text import Text
from ustun.store import Database
from ustun.store.plans import run
from ustun.webhooks.catalog import EventType
from ustun.webhooks.endpoint_body import INTEGRAL_FLOAT

router = APIRouter(prefix="/v1/portal-sessions", tags=["portal"])
PATH = "/v1/portal-sessions"


class PortalSessionIn(BaseModel):
    """The body of `POST /v1/portal-sessions`."""

    model_config = ConfigDict(extra="forbid")

    account: Text = Field(
        min_length=1, max_length=100, description="The account's name (`--account` of its keys)."
    )
    ttl: Annotated[StrictInt, Field(ge=portal.MIN_TTL, le=portal.MAX_TTL), INTEGRAL_FLOAT] = Field(
        default=portal.DEFAULT_TTL,
        description=f"Seconds the link works, {portal.MIN_TTL} to {portal.MAX_TTL} (7 days).",
    )
    event_types: list[StrictStr] | None = Field(
        default=None,
        min_length=1,
        max_length=portal.MAX_EVENT_TYPES,
        description="Restrict the link to these event types of `GET /v1/event-types`: its "
        "holder may subscribe to them only, and sees only them in the catalogue. Absent: all.",
    )


def render(session: portal.PortalSession) -> dict[str, Any]:
    """The public shape of a portal session (never its token nor the token's hash)."""
    return {
        "id": session.id,
        "object": "portal_session",
        "account": session.account,
        "event_types": None if session.event_types is None else list(session.event_types),
        "created_at": rfc3339(session.created_at),
        "expires_at": rfc3339(session.expires_at),
        "revoked_at": rfc3339_or_none(session.revoked_at),
        "created_by": session.created_by,
    }


async def operator(request: Request, db: Database) -> Credential:
    """The request's credential if it is an operator key; else 403 `forbidden`."""
    credential: Credential = request.state.credential
    if credential.portal is not None or not await is_operator(db, credential.key_id):
        raise ProblemError(
            "forbidden",
            "Portal sessions are opened and revoked with an operator key "
            "(`ustun keys create --operator`); this key is not one.",
        )
    return credential


@router.post("", status_code=201, openapi_extra=idempotency("optional"))
async def create_session(
    body: PortalSessionIn, request: Request, db: DB, settings: AppSettings, response: Response
) -> dict[str, Any]:
    """A portal link for one account: `url` (with the token in its fragment) and `token` are
    in this response only (sent `no-store`)."""
    credential = await operator(request, db)
    catalogue: tuple[EventType, ...] = request.app.state.event_types
    plan = portal.opening(
        body.account,
        base_url=settings.public_base_url,
        ttl=body.ttl,
        event_types=body.event_types,
        known_types={event.name for event in catalogue},
        created_by=credential.key_id,
        new_account=False,
    )
    async with db.unit_of_work() as uow:
        link = await run(plan, uow.conn)
    response.headers["location"] = f"{PATH}/{link.session.id}"
    response.headers[CACHE_CONTROL] = NO_STORE
    return render(link.session) | {"url": link.url, "token": link.token}


@router.get("/{session_id}")
async def get_session(session_id: str, request: Request, db: DB) -> dict[str, Any]:
    """One portal session: its account, event types, when it ends, whether it was revoked."""
    await operator(request, db)
    session = await portal.read(db, session_id)
    if session is None:
        raise ProblemError("not-found", f"No portal session {session_id}.")
    return render(session)


@router.delete("/{session_id}", status_code=204)
async def revoke_session(session_id: str, request: Request, db: DB) -> Response:
    """Revoke a portal session at once: its link is refused (401) from the next request on."""
    await operator(request, db)
    if await portal.revoke(db, session_id) is None:
        raise ProblemError("not-found", f"No portal session {session_id}.")
    return Response(status_code=204)
