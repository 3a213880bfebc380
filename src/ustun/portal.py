"""Consumer portal links: one account's webhook endpoints, deliveries and catalogue, handed to
the people of that account (an app's tenant) for a short while.

A link is `{base_url}/portal/#token=ptl_…`. The token is 256 random bits, stored only as its
SHA-256 (like an API key), and travels in the URL's fragment, which a browser never sends to a
server: it is in no access log. The portal page (served by `ustun serve` under `/portal/`)
moves it to the tab's session storage and calls the API with `Authorization: Bearer <token>`,
which the service accepts as that account on its webhook routes only, until the session
expires or is revoked.

`link(db, account, base_url=…)` opens one from an app that uses ustun as a library beside
`ustun serve`; the service's `POST /v1/portal-sessions` (an operator key) runs the same
`open_session`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock, ids
from ustun.errors import ProblemError
from ustun.store import Database
from ustun.store.accounts import account_id as named_account
from ustun.store.plans import run
from ustun.store.tables import accounts, portal_sessions
from ustun.webhooks import catalog as event_catalog

TOKEN_PREFIX = "ptl_"  # noqa: S105 (a prefix, not a secret)
"""What every portal token starts with, so that it is told from an API key at a glance."""
DEFAULT_TTL = 3600
"""How long a link works unless told otherwise: one hour, in seconds."""
MIN_TTL = 60
"""The shortest life a link may be given, in seconds."""
MAX_TTL = 7 * 86_400
"""The longest life a link may be given, in seconds: a week."""
PORTAL_PATH = "/portal/"
"""Where `ustun serve` serves the portal page."""
MAX_EVENT_TYPES = 100
"""The most event types one link may be restricted to (as many as an endpoint's filter)."""


@dataclass(frozen=True, slots=True)
class PortalSession:
    """A portal session as stored (never its token). `event_types`: the types its holder may
    subscribe endpoints to and sees in the catalogue; None: all of them."""

    id: str
    account_id: str
    account: str
    event_types: tuple[str, ...] | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    created_by: str | None

    def refusal(self, now: datetime) -> str | None:
        """Why the session no longer admits its holder at `now`, or None while it does."""
        if self.revoked_at is not None:
            return "This portal link was revoked; ask the service that sent it for a new one."
        if now >= self.expires_at:
            return (
                f"This portal link expired at {clock.rfc3339(self.expires_at)}; "
                "ask the service that sent it for a new one."
            )
        return None


@dataclass(frozen=True, slots=True)
class PortalLink:
    """A new link: its session, the token (shown here only) and the URL that carries it."""

    session: PortalSession
    token: str
    url: str


def hash_token(token: str) -> str:
    """The stored form of a token: its SHA-256 (256 random bits cannot be brute-forced)."""
    return hashlib.sha256(token.encode()).hexdigest()


def link_url(base_url: str, token: str) -> str:
    """The portal's URL on `base_url` with `token` in the fragment (never sent to a server)."""
    return f"{base_url.rstrip('/')}{PORTAL_PATH}#token={token}"


def _refuse(field: str, message: str, kind: str) -> ProblemError:
    return ProblemError(
        "validation-error",
        f"Invalid value in body.{field}: {message}.",
        errors=[{"field": f"body.{field}", "message": message, "type": kind}],
    )


def checked_ttl(ttl: float | timedelta) -> timedelta:
    """`ttl` (seconds, or a timedelta) if within `MIN_TTL` … `MAX_TTL`; else 422."""
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if not MIN_TTL <= seconds <= MAX_TTL:
        raise _refuse(
            "ttl",
            f"a portal link lives {MIN_TTL} to {MAX_TTL} seconds (7 days), not {seconds:g}",
            "range",
        )
    return timedelta(seconds=seconds)


def checked_event_types(
    names: Sequence[str] | None, known: Collection[str]
) -> tuple[str, ...] | None:
    """`names` without repeats if each is an event type of `known`; else 422 naming the first
    that is not. None stays None (the whole catalogue)."""
    if names is None:
        return None
    if not 1 <= len(names) <= MAX_EVENT_TYPES:
        raise _refuse(
            "event_types", f"list 1 to {MAX_EVENT_TYPES} event types, or leave it out", "length"
        )
    for name in names:
        if name not in known:
            raise _refuse(
                "event_types", f"{name!r} is not an event type of the catalogue", "unknown"
            )
    return tuple(dict.fromkeys(names))


_SESSIONS = select(portal_sessions, accounts.c.name.label("account_name")).join(
    accounts, portal_sessions.c.account_id == accounts.c.id
)


def _session(row: Row[Any]) -> PortalSession:
    return PortalSession(
        id=row.id,
        account_id=row.account_id,
        account=row.account_name,
        event_types=None if row.event_types is None else tuple(json.loads(row.event_types)),
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        created_by=row.created_by,
    )


async def open_session(
    conn: AsyncConnection,
    account_id: str,
    *,
    base_url: str,
    ttl: float | timedelta = DEFAULT_TTL,
    event_types: Sequence[str] | None = None,
    known_types: Collection[str],
    created_by: str | None = None,
) -> PortalLink:
    """Store a new session of `account_id` in the caller's transaction; return its link.

    `known_types`: the catalogue's names, which `event_types` must each be one of."""
    life = checked_ttl(ttl)
    allowed = checked_event_types(event_types, known_types)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = clock.now()
    session_id = ids.new_id("ps")
    await conn.execute(
        insert(portal_sessions).values(
            id=session_id,
            account_id=account_id,
            token_hash=hash_token(token),
            event_types=None if allowed is None else json.dumps(list(allowed)),
            created_at=now,
            expires_at=now + life,
            created_by=created_by,
        )
    )
    row = (await conn.execute(_SESSIONS.where(portal_sessions.c.id == session_id))).one()
    return PortalLink(_session(row), token, link_url(base_url, token))


async def link(
    db: Database,
    account: str,
    *,
    base_url: str,
    ttl: float | timedelta = DEFAULT_TTL,
    event_types: Sequence[str] | None = None,
    catalog: event_catalog.Catalog | None = None,
) -> PortalLink:
    """A portal link for the account named `account` (made on first use, as `emit` does),
    served by the `ustun serve` at `base_url` on the same database.

    `ttl`: seconds (or a timedelta), 60 s to 7 days. `event_types`: restrict what the link's
    holder may subscribe to, each a type of `catalog` (by default the active catalogue).
    A `ProblemError` (422 `validation-error`) says what is wrong with either."""
    known = catalog if catalog is not None else event_catalog.active
    names = {event.name for event in known}
    checked_ttl(ttl)
    checked_event_types(event_types, names)
    async with db.unit_of_work() as uow:
        account_id = await run(named_account(account), uow.conn)
        return await open_session(
            uow.conn,
            account_id,
            base_url=base_url,
            ttl=ttl,
            event_types=event_types,
            known_types=names,
        )


async def find(db: Database, token: str) -> PortalSession | None:
    """The session of `token` (live, expired or revoked: see `refusal`), or None if unknown."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    async with db.read() as conn:
        row = (
            await conn.execute(_SESSIONS.where(portal_sessions.c.token_hash == hash_token(token)))
        ).first()
    return None if row is None else _session(row)


async def read(db: Database, session_id: str) -> PortalSession | None:
    """The session `session_id`, or None."""
    async with db.read() as conn:
        row = (await conn.execute(_SESSIONS.where(portal_sessions.c.id == session_id))).first()
    return None if row is None else _session(row)


async def revoke(db: Database, session_id: str) -> PortalSession | None:
    """End a session at once (revoking twice keeps the first time); None if unknown."""
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            update(portal_sessions)
            .where(portal_sessions.c.id == session_id, portal_sessions.c.revoked_at.is_(None))
            .values(revoked_at=clock.now())
        )
        row = (await uow.conn.execute(_SESSIONS.where(portal_sessions.c.id == session_id))).first()
    return None if row is None else _session(row)
