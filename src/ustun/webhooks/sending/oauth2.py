"""Bearer tokens for endpoints that require OAuth2 client credentials (RFC 6749 §4.4).

A dispatcher fetches one token per set of credentials and sends it with every delivery to them
until shortly before it expires (one fetch at a time, however many deliveries wait for it). A
401 answer gets one fresh token and one more try, within the same attempt. The token request
goes through the dispatcher's session, so the SSRF guard of webhook URLs covers the token URL
too; a token that cannot be had is a failed attempt saying why, retried on the schedule.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from ustun.errors import UstunError
from ustun.webhooks.endpoint_auth import OAuth2
from ustun.webhooks.sending import transport

EARLY = 30.0
"""A token is replaced this many seconds before it expires (or at half its life, if shorter)."""
UNSTATED_LIFETIME = 300.0
"""How long a token is kept when the server does not say (`expires_in` is optional)."""
MAX_ANSWER = 64 * 1024
"""The most of a token answer read."""


class TokenError(UstunError):
    """No token: the reason, as an attempt's error records it."""


class Tokens:
    """A dispatcher's bearer tokens, by credentials."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._held: dict[OAuth2, tuple[str, float]] = {}
        self._fetching: dict[OAuth2, asyncio.Task[tuple[str, float]]] = {}

    async def bearer(
        self, http: aiohttp.ClientSession, credentials: OAuth2, *, fresh: bool = False
    ) -> str:
        """A token for `credentials`: the one held while it is good, else a new one (`fresh`:
        a new one in any case). `TokenError` when none can be had."""
        held = self._held.get(credentials)
        if held is not None and not fresh and time.monotonic() < held[1]:
            return held[0]
        self._held.pop(credentials, None)
        fetching = self._fetching.get(credentials)
        if fetching is None:
            fetching = self._fetching[credentials] = asyncio.create_task(
                self._fetch(http, credentials)
            )
            fetching.add_done_callback(lambda _: self._fetching.pop(credentials, None))
        token, good_until = await asyncio.shield(fetching)
        self._held[credentials] = token, good_until
        return token

    async def _fetch(self, http: aiohttp.ClientSession, credentials: OAuth2) -> tuple[str, float]:
        target = transport.target(credentials.token_url, self.allow_private)
        if isinstance(target, str):
            raise TokenError(f"oauth2: the token URL is refused: {target}")
        form = {"grant_type": "client_credentials"}
        if credentials.scope is not None:
            form["scope"] = credentials.scope
        # RFC 6749 §2.3.1: the id and secret are form-encoded, then sent as HTTP Basic.
        pair = (
            f"{quote(credentials.client_id, safe='')}:{quote(credentials.client_secret, safe='')}"
        )
        headers = {
            "authorization": f"Basic {base64.b64encode(pair.encode()).decode()}",
            "content-type": "application/x-www-form-urlencoded",
            "accept": "application/json",
        }
        started = time.monotonic()
        try:
            async with http.post(
                target, data=urlencode(form), headers=headers, allow_redirects=False
            ) as response:
                status, answer = response.status, await response.content.read(MAX_ANSWER)
        except TimeoutError:
            raise TokenError("oauth2: the token request timed out") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TokenError(f"oauth2: the token request failed: {exc}") from None
        return _token(status, answer, started)


def _token(status: int, answer: bytes, started: float) -> tuple[str, float]:
    """The access token of a token answer and when to stop using it (monotonic seconds)."""
    try:
        parsed: Any = json.loads(answer)
    except ValueError:
        parsed = None
    if status != 200:
        error = parsed.get("error") if isinstance(parsed, dict) else None
        said = f": {str(error)[:200]}" if error else ""
        raise TokenError(f"oauth2: the token endpoint answered {status}{said}")
    if not isinstance(parsed, dict) or not isinstance(parsed.get("access_token"), str):
        raise TokenError("oauth2: the token answer holds no access_token")
    if str(parsed.get("token_type", "")).lower() != "bearer":
        raise TokenError(f"oauth2: the token type is {parsed.get('token_type')!r}, not Bearer")
    lifetime = parsed.get("expires_in", UNSTATED_LIFETIME)
    if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or lifetime <= 0:
        lifetime = UNSTATED_LIFETIME
    return parsed["access_token"], started + lifetime - min(EARLY, lifetime / 2)


async def post(
    http: aiohttp.ClientSession,
    tokens: Tokens,
    credentials: OAuth2,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allow_private: bool,
    tls: ssl.SSLContext | None = None,
) -> transport.Outcome:
    """`transport.post` with the credentials' bearer token; on a 401, once more with a new one."""

    async def send(fresh: bool) -> transport.Outcome:
        try:
            token = await tokens.bearer(http, credentials, fresh=fresh)
        except TokenError as exc:
            return transport.Outcome(None, 0.0, error=str(exc))
        sent = {**headers, "authorization": f"Bearer {token}"}
        return await transport.post(http, url, body, sent, allow_private=allow_private, tls=tls)

    outcome = await send(fresh=False)
    return await send(fresh=True) if outcome.status == 401 else outcome
