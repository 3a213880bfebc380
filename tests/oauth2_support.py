"""OAuth2 test helpers: a token endpoint and a receiver of the test's own that takes only the
latest token it issued (client credentials, RFC 6749 §4.4)."""

from __future__ import annotations

import base64
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from support import free_port
from ustun.webhooks.endpoint_auth import OAuth2


@dataclass
class Authority:
    """A token endpoint (`/token`) and a receiver (`/hook`) that takes only its latest token."""

    port: int = field(default_factory=free_port)
    lifetime: Any = 3600
    answer: tuple[int, dict[str, Any]] | None = None  # a scripted token answer instead
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    valid: str = ""
    numbers: itertools.count[int] = field(default_factory=itertools.count)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def credentials(self) -> OAuth2:
        return OAuth2(self.url("/token"), "ustun client", "s3cr:et/é", "hooks.write")

    async def token(self, request: web.Request) -> web.Response:
        basic = request.headers.get("authorization", "").removeprefix("Basic ")
        form = parse_qs(await request.text())
        self.token_requests.append(
            {"basic": base64.b64decode(basic).decode(), "form": form, "type": request.content_type}
        )
        if self.answer is not None:
            status, body = self.answer
            return web.json_response(body, status=status)
        self.valid = f"tok-{next(self.numbers)}"
        body = {"access_token": self.valid, "token_type": "Bearer", "expires_in": self.lifetime}
        return web.json_response(body)

    async def hook(self, request: web.Request) -> web.Response:
        got = request.headers.get("authorization", "")
        self.hooks.append(got)
        return web.Response(status=200 if got == f"Bearer {self.valid}" else 401)


@asynccontextmanager
async def serving_authority() -> AsyncIterator[Authority]:
    """An `Authority` on a free port until the `async with` ends."""
    served = Authority()
    app = web.Application()
    app.router.add_post("/token", served.token)
    app.router.add_post("/hook", served.hook)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", served.port).start()
    try:
        yield served
    finally:
        await runner.cleanup()
