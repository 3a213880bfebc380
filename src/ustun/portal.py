"""Consumer portal links: one account's webhook endpoints, deliveries and catalogue, handed to
the people of that account (an app's tenant) for a short while.

A link is `{base_url}/portal/#token=ptl_…`. The token is 256 random bits, stored only as its
SHA-256 (like an API key), and travels in the URL's fragment, which a browser never sends to a
server: it is in no access log. The portal page (served by `ustun serve` under `/portal/`)
moves it to the tab's session storage and calls the API with `Authorization: Bearer <token>`,
which the service accepts as that account on its webhook routes only, until the session
expires or is revoked.

`link(db, account, base_url=…)` opens one from an app that uses ustun as a library beside
`ustun serve` (`link_on` on a host framework's connection: `ustun.django.portal`,
`ustun.flask.portal`); the service's `POST /v1/portal-sessions` (an operator key) runs the same
plan, `opening`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, insert, select, update

from ustun import clock, ids
from ustun.errors import ProblemError
from ustun.store import Database
from ustun.store.accounts import account_id as named_account
from ustun.store.plans import Plan, count, rows, run, run_sync
from ustun.store.statements import Statement
from ustun.store.tables import accounts, portal_sessions
from ustun.webhooks import catalog as event_catalog

if TYPE_CHECKING:
    from ustun.store.dbapi import DbapiConnection

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
_BY_ID = Statement(_SESSIONS.where(portal_sessions.c.id == bindparam("id")))
_BY_HASH = Statement(_SESSIONS.where(portal_sessions.c.token_hash == bindparam("token_hash")))
_ACCOUNT = Statement(select(accounts.c.id).where(accounts.c.name == bindparam("name")))
_INSERT = Statement(
    insert(portal_sessions).values(
        {
            name: bindparam(name, type_=portal_sessions.c[name].type)
            for name in (
                "id",
                "account_id",
                "token_hash",
                "event_types",
                "created_at",
                "expires_at",
                "created_by",
            )
        }
    )
)
_REVOKE = Statement(
    update(portal_sessions)
    .where(portal_sessions.c.id == bindparam("id"), portal_sessions.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("now", type_=portal_sessions.c.revoked_at.type))
)


def _session(row: Any) -> PortalSession:
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


def opening(
    account: str,
    *,
    base_url: str,
    ttl: float | timedelta = DEFAULT_TTL,
    event_types: Sequence[str] | None = None,
    known_types: Collection[str],
    created_by: str | None = None,
    new_account: bool = True,
) -> Plan[PortalLink]:
    """Store a new session of the account named `account` and return its link, as a plan
    (`ustun.store.plans`: run on the service's connection or a host framework's).

    `known_types`: the catalogue's names, which `event_types` must each be one of.
    `new_account`: make the account on first use (as `emit` does); else an unknown name is
    422 `validation-error` (the service's route: an operator names an existing account)."""
    life = checked_ttl(ttl)
    allowed = checked_event_types(event_types, known_types)
    if new_account:
        account_id = yield from named_account(account)
    else:
        found = yield rows(_ACCOUNT, {"name": account})
        if not found:
            raise _refuse("account", f"no account is named {account!r}", "unknown")
        account_id = found[0].id
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = clock.now()
    session_id = ids.new_id("ps")
    yield count(
        _INSERT,
        {
            "id": session_id,
            "account_id": account_id,
            "token_hash": hash_token(token),
            "event_types": None if allowed is None else json.dumps(list(allowed)),
            "created_at": now,
            "expires_at": now + life,
            "created_by": created_by,
        },
    )
    made = yield rows(_BY_ID, {"id": session_id})
    return PortalLink(_session(made[0]), token, link_url(base_url, token))


def _names(catalog: event_catalog.Catalog | None) -> set[str]:
    return {event.name for event in (catalog if catalog is not None else event_catalog.active)}


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
    plan = opening(
        account, base_url=base_url, ttl=ttl, event_types=event_types, known_types=_names(catalog)
    )
    async with db.unit_of_work() as uow:
        return await run(plan, uow.conn)


def link_on(
    conn: DbapiConnection,
    account: str,
    *,
    base_url: str,
    ttl: float | timedelta = DEFAULT_TTL,
    event_types: Sequence[str] | None = None,
    catalog: event_catalog.Catalog | None = None,
) -> PortalLink:
    """`link` on a host framework's synchronous connection, in the transaction it has open
    (Django's, a Flask app's SQLAlchemy session's): the session exists once that commits."""
    plan = opening(
        account, base_url=base_url, ttl=ttl, event_types=event_types, known_types=_names(catalog)
    )
    return run_sync(plan, conn)


async def find(db: Database, token: str) -> PortalSession | None:
    """The session of `token` (live, expired or revoked: see `refusal`), or None if unknown."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    found = await _BY_HASH.read(db, {"token_hash": hash_token(token)})
    return _session(found[0]) if found else None


async def read(db: Database, session_id: str) -> PortalSession | None:
    """The session `session_id`, or None."""
    found = await _BY_ID.read(db, {"id": session_id})
    return _session(found[0]) if found else None


def revoking(session_id: str) -> Plan[PortalSession | None]:
    """End a session at once (revoking twice keeps the first time), as a plan; None if
    unknown."""
    yield count(_REVOKE, {"id": session_id, "now": clock.now()})
    found = yield rows(_BY_ID, {"id": session_id})
    return _session(found[0]) if found else None


async def revoke(db: Database, session_id: str) -> PortalSession | None:
    """`revoking` in a unit of work of its own."""
    async with db.unit_of_work() as uow:
        return await run(revoking(session_id), uow.conn)
