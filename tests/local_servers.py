"""Real local network pieces for client tests: an ASGI app served by uvicorn in a thread, and
a TCP proxy that lets a request through but cuts the connection before the response arrives,
and a scripted endpoint that answers what a test queued."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import Response

from support import free_port, wait_for


class ThreadedServer:
    """Serve `app` with uvicorn on a free port, in a background thread, for one `with` block."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=10, what="the local server to start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class CuttingProxy:
    """A TCP proxy to `127.0.0.1:upstream_port` that drops the connection the moment the
    response to a request starts — the first `cuts` times a request whose method is `method`
    (any, by default) is answered: the server has done the work, the client never hears of it.
    HTTP/1.1 without pipelining: the first bytes back after a request are its response."""

    def __init__(self, upstream_port: int, *, cuts: int = 1, method: str = "") -> None:
        self.upstream_port = upstream_port
        self.method = method.encode()
        self.cuts_left = cuts
        self.cut = 0
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> CuttingProxy:
        self.thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self.loop)
        started.result(10)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        asked: list[bytes] = []  # the start of the request not answered yet

        async def requests() -> None:
            while data := await client_r.read(65536):
                if not asked:
                    asked.append(data)
                upstream_w.write(data)
                await upstream_w.drain()

        async def responses() -> None:
            while data := await upstream_r.read(65536):
                request = asked.pop() if asked else b""
                if request.startswith(self.method) and request and self.cuts_left > 0:
                    self.cuts_left -= 1
                    self.cut += 1
                    client_w.transport.abort()  # RST: the response never reaches the client
                    return
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in (client_w, upstream_w):
            writer.close()


METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass(frozen=True)
class Reply:
    """One canned answer."""

    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str = "application/json"


def problem(status: int, slug: str, **headers: str) -> Reply:
    """A problem+json answer of type `/problems/<slug>`."""
    body = {"type": f"/problems/{slug}", "title": slug, "status": status, "detail": f"{slug}!"}
    return Reply(status, body, headers, "application/problem+json")


class Script:
    """The answers still to give (then 200 `{"ok": true}`), and every request seen so far."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[Seen] = []

    def then(self, *replies: Reply) -> Script:
        self.replies.extend(replies)
        return self

    async def endpoint(self, request: Request) -> Response:
        body = await request.body()
        self.seen.append(
            Seen(request.method, request.url.path, dict(request.headers), body, time.monotonic())
        )
        reply = self.replies.pop(0) if self.replies else Reply()
        return Response(
            json.dumps(reply.body), reply.status, reply.headers, media_type=reply.media_type
        )
