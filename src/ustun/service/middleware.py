"""Pure-ASGI middleware of the service: request ids, unstorable-URL refusal, authentication."""

from __future__ import annotations

import time
from urllib.parse import unquote_to_bytes

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun import ids, logs
from ustun.service.accounts import Account, account_for_key
from ustun.service.problems import problem_response
from ustun.store import Database

REQUEST_ID_HEADER = "x-request-id"


class RequestIdMiddleware:
    """Give every request an id (`req_…`), echoed in `X-Request-Id` and problem `instance`s."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = ids.new_id("req")
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        token = logs.bind_request_id(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            logs.reset_request_id(token)


class UrlGuardMiddleware:
    """Refuse (422 `validation-error`) a URL whose path or query holds a NUL character.

    PostgreSQL cannot compare text with NUL in it, so such an id or filter would otherwise
    fail in the database as a 500 instead of being refused as bad input.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            part = _nul_part(scope)
            if part is not None:
                response = problem_response(
                    Request(scope),
                    "validation-error",
                    f"The {part} must not contain the NUL character (%00).",
                    errors=[{"field": part, "message": "contains NUL (%00)", "type": "nul"}],
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _nul_part(scope: Scope) -> str | None:
    if "\x00" in scope["path"]:
        return "path"
    if b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
        return "query"
    return None


class AuthMiddleware:
    """Require `Authorization: Bearer <key>` under `prefix`; put the `Account` in scope state.

    Lookups are cached for `cache_seconds` so a hot API does not read the key table per request.
    """

    def __init__(
        self, app: ASGIApp, db: Database, *, prefix: str = "/v1/", cache_seconds: float = 30.0
    ) -> None:
        self.app = app
        self.db = db
        self.prefix = prefix
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[Account, float]] = {}

    async def _lookup(self, key: str) -> Account | None:
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        account = await account_for_key(self.db, key)
        if account is not None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (account, now + self.cache_seconds)
        return account

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        account = None
        if scheme.lower() == "bearer" and key.strip():
            account = await self._lookup(key.strip())
        if account is None:
            response = problem_response(
                request,
                "unauthorized",
                "Missing or unknown API key: send `Authorization: Bearer <key>`.",
                headers={"www-authenticate": 'Bearer realm="ustun"'},
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["account"] = account
        await self.app(scope, receive, send)
