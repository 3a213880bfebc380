"""Pure-ASGI middleware that adds fixed headers to the responses under a path prefix.

The API's cache policy (RFC 9111 §5.2.2) is one use: `private, no-cache` lets a browser or
client cache keep an answer but makes it revalidate (the ETag / 304 flow) before every reuse,
so it never shows a stale payment status, and shared caches must not store it at all, as
every answer is one account's. `no-store` would forbid the revalidation as well; a response
that sets its own `Cache-Control` (e.g. `no-store` on one that shows a secret) keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_CACHE_CONTROL = "private, no-cache"
API_HEADERS = {"cache-control": API_CACHE_CONTROL}


class PrefixHeadersMiddleware:
    """Add `headers` to every response whose path starts with `prefix` (errors and redirects
    too); with `overwrite=False` a header the response set itself is kept."""

    def __init__(
        self, app: ASGIApp, *, prefix: str, headers: Mapping[str, str], overwrite: bool
    ) -> None:
        self.app = app
        self.prefix = prefix
        self.headers = dict(headers)
        self.overwrite = overwrite

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    if self.overwrite:
                        headers[name] = value
                    else:
                        headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
