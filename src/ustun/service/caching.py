"""Pure-ASGI middleware that tells caches how they may reuse API responses (RFC 9111 §5.2.2).

`private, no-cache`: a browser or client cache may keep an answer but must revalidate it (the
ETag / 304 flow) before every reuse, so it never shows a stale payment status; shared caches
must not store it at all, as every answer is one account's. `no-store` would forbid the
revalidation as well. A response that sets its own `Cache-Control` (e.g. `no-store` on one
that shows a secret) keeps it.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_CACHE_CONTROL = "private, no-cache"


class CacheControlMiddleware:
    """Add `Cache-Control` to every response under `prefix` that does not set one."""

    def __init__(
        self, app: ASGIApp, *, prefix: str = "/v1/", value: str = API_CACHE_CONTROL
    ) -> None:
        self.app = app
        self.prefix = prefix
        self.value = value

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return

        async def send_cache_control(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).setdefault("cache-control", self.value)
            await send(message)

        await self.app(scope, receive, send_cache_control)
