"""Dashboard sessions: a signed cookie with a CSRF token and a session id, never the API key.

A login stores the session server-side (`dashboard_sessions`, keyed by the SHA-256 of a random
id) and the cookie carries the id, signed (itsdangerous, HMAC) with a key derived by
HKDF-SHA256 from `USTUN_SECRET_KEY` (without one, a random key per process: sessions then
end on restart). Logout deletes the row, and revoking the API key used to log in ends the
session too, so a copied cookie stops working at once. A visitor who has not logged in gets a
session with a CSRF token and no id, so the login form is protected like every other form
(double submit, checked in constant time).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import delete, insert, select
from starlette.requests import Request
from starlette.responses import Response

from ustun import clock
from ustun.service.plumbing.accounts import Account, Credential, hash_key
from ustun.store import Database
from ustun.store.tables import accounts, api_keys, dashboard_sessions

COOKIE = "ustun_dashboard"
MAX_AGE = 12 * 3600  # seconds a login lasts
CSRF_FIELD = "csrf_token"


@dataclass(frozen=True, slots=True)
class Session:
    """What the cookie holds: the CSRF token and, once logged in, the session id."""

    csrf: str
    id: str | None = None

    def csrf_matches(self, presented: str | None) -> bool:
        """Whether a form's token is this session's, compared in constant time."""
        return presented is not None and secrets.compare_digest(presented, self.csrf)


def derive_key(secret_key: str | None) -> bytes:
    """The cookie-signing key: HKDF-SHA256 of `USTUN_SECRET_KEY`, or random for this process."""
    if secret_key is None:
        return secrets.token_bytes(32)
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"ustun dashboard session")
    return hkdf.derive(secret_key.encode())


class SessionCodec:
    """Reads and writes the session cookie of requests and responses."""

    def __init__(self, key: bytes) -> None:
        self._serializer = URLSafeTimedSerializer(key, salt="ustun.dashboard.session")

    def read(self, request: Request) -> Session | None:
        """The request's session if its cookie is present, authentic and fresh."""
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            data = self._serializer.loads(raw, max_age=MAX_AGE)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("csrf"), str):
            return None
        session_id = data.get("sid")
        return Session(data["csrf"], session_id if isinstance(session_id, str) else None)

    def write(self, request: Request, response: Response, session: Session) -> None:
        """Set `session` as the cookie of `response`; `Secure` when the request came by https.

        Behind a TLS proxy the scheme is the proxy's `X-Forwarded-Proto`, believed only from
        `USTUN_TRUSTED_PROXIES` (the app's proxy-headers middleware).
        """
        value = self._serializer.dumps({"csrf": session.csrf, "sid": session.id})
        response.set_cookie(
            COOKIE,
            value,
            max_age=MAX_AGE,
            path="/dashboard",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    @staticmethod
    def clear(response: Response) -> None:
        """Remove the cookie (logout)."""
        response.delete_cookie(COOKIE, path="/dashboard")


def new_session(session_id: str | None = None) -> Session:
    """A session with a fresh CSRF token (a new one on every login)."""
    return Session(secrets.token_urlsafe(32), session_id)


async def open_session(db: Database, credential: Credential) -> str:
    """Store a new session of the key's account; return its id (only the cookie holds it).

    Sessions past their end are deleted on the way, so the table holds live ones only.
    """
    session_id = secrets.token_urlsafe(32)
    now = clock.now()
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            delete(dashboard_sessions).where(dashboard_sessions.c.expires_at <= now)
        )
        await uow.conn.execute(
            insert(dashboard_sessions).values(
                id_hash=hash_key(session_id),
                account_id=credential.account.id,
                api_key_id=credential.key_id,
                created_at=now,
                expires_at=now + timedelta(seconds=MAX_AGE),
            )
        )
    return session_id


async def session_account(db: Database, session_id: str) -> Account | None:
    """The account of a live session: not logged out, not expired, its key not revoked."""
    s = dashboard_sessions
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(accounts.c.id, accounts.c.name)
                .select_from(s)
                .join(accounts, accounts.c.id == s.c.account_id)
                .join(api_keys, api_keys.c.id == s.c.api_key_id)
                .where(
                    s.c.id_hash == hash_key(session_id),
                    s.c.expires_at > clock.now(),
                    api_keys.c.revoked_at.is_(None),
                )
            )
        ).first()
    return Account(id=row.id, name=row.name) if row else None


async def end_session(db: Database, session_id: str) -> None:
    """Delete a session (logout): its cookie, wherever copied, no longer logs anyone in."""
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            delete(dashboard_sessions).where(dashboard_sessions.c.id_hash == hash_key(session_id))
        )
