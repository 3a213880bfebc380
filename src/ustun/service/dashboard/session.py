"""The dashboard's signed session cookie: the account id and a CSRF token, never the API key.

The cookie is signed (itsdangerous, HMAC) with a key derived by HKDF-SHA256 from
`USTUN_SECRET_KEY`; without one, a random key per process (sessions then end on restart).
A visitor who has not logged in gets a session with no account but with a CSRF token, so the
login form is protected like every other form (double submit, checked in constant time).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

COOKIE = "ustun_dashboard"
MAX_AGE = 12 * 3600  # seconds a login lasts
CSRF_FIELD = "csrf_token"


@dataclass(frozen=True, slots=True)
class Session:
    """What the cookie holds: the logged-in account (if any) and the CSRF token of the session."""

    csrf: str
    account_id: str | None = None

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
        account_id = data.get("account")
        return Session(data["csrf"], account_id if isinstance(account_id, str) else None)

    def write(self, request: Request, response: Response, session: Session) -> None:
        """Set `session` as the cookie of `response`."""
        value = self._serializer.dumps({"csrf": session.csrf, "account": session.account_id})
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


def new_session(account_id: str | None = None) -> Session:
    """A session with a fresh CSRF token (a new one on every login)."""
    return Session(secrets.token_urlsafe(32), account_id)
