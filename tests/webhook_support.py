"""Webhook test helpers: a real local receiver (aiohttp on a free port) that a test scripts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from aiohttp import web
from sqlalchemy import select
from starlette.types import ASGIApp

from support import free_port
from ustun.service import create_app
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import attempts, deliveries

Reply = Callable[[web.Request], Awaitable[web.StreamResponse]]
# make_endpoint(url, events=("*",), **options) -> (endpoint id, secret)
MakeEndpoint = Callable[..., Awaitable[tuple[str, str]]]
# A compressed retry schedule: three retries within 1.4 s.
SCHEDULE = (0.2, 0.4, 0.8)
# The service's public URL in dispatcher tests: thin payloads' URLs start with it.
PUBLIC_URL = "https://api.example.test/ustun"


async def ok(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    # The TCP port the request came from: which process sent it.
    peer_port: int


@dataclass
class Receiver:
    """Serves every path; `script[path]` is a list of replies used in turn, then `ok`.

    `in_flight` counts requests not yet answered; `most_in_flight` is its high-water mark.
    """

    port: int = field(default_factory=free_port)
    script: dict[str, list[Reply]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    _runner: web.AppRunner | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self, path: str = "/hook") -> list[bytes]:
        return [r.body for r in self.received if r.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        port = peer[1] if peer else 0
        got = Received(request.path, dict(request.headers), body, time.monotonic(), port)
        self.received.append(got)
        replies = self.script.get(request.path, [])
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await (replies.pop(0) if replies else ok)(request)
        finally:
            self.in_flight -= 1

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@dataclass
class ThreadedReceiver(Receiver):
    """A `Receiver` on an event loop of its own thread: it stamps each arrival as it comes, however
    busy the test's own loop is (a stalled loop stamps a burst late, all at once)."""

    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    async def start(self) -> ThreadedReceiver:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        self._loop = loop
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(super().start(), loop))
        return self

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(super().stop(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)
        loop.close()
        self._loop = self._thread = None


def status(code: int, headers: dict[str, str] | None = None) -> Reply:
    async def reply(_: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text=f"answer {code}", headers=headers)

    return reply


def sleep(seconds: float) -> Reply:
    async def reply(_: web.Request) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(text="late")

    return reply


def hold(gate: asyncio.Event) -> Reply:
    """A reply that hangs until `gate` is set: an endpoint that is stuck, not down."""

    async def reply(_: web.Request) -> web.StreamResponse:
        await gate.wait()
        return web.Response(text="released")

    return reply


@asynccontextmanager
async def serving(
    settings: Settings, db: Database, api_key: str, **changes: object
) -> AsyncIterator[httpx.AsyncClient]:
    """The service with its embedded worker (so its dispatcher), private addresses allowed, a
    quick retry schedule, no circuit breaker (unless `changes` set one) and `changes` to
    `settings`; yields an authenticated in-process client."""
    quick = {"webhook_retry_schedule": "0.2,0.2", "webhook_circuit_failures": 0}
    tuned = settings.model_copy(update={"webhook_allow_private": True, **quick, **changes})
    app = create_app(tuned, db=db, worker=True)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://testserver",
            headers={"authorization": f"Bearer {api_key}"},
        ) as http,
    ):
        yield http


@asynccontextmanager
async def serving_http(app: ASGIApp, port: int) -> AsyncIterator[None]:
    """`app` over real HTTP on 127.0.0.1:`port` (uvicorn in this event loop, lifespan included)
    for the body of the `with`."""
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    running = asyncio.create_task(server.serve())
    try:
        await until(lambda: _started(server), what="uvicorn to start")
        yield
    finally:
        server.should_exit = True
        await running


async def _started(server: uvicorn.Server) -> bool:
    return server.started


async def until(condition: Callable[[], Awaitable[Any]], *, within: float = 15.0, what: str) -> Any:
    """Await `condition()` until it is truthy (the async twin of `support.wait_for`)."""
    deadline = time.monotonic() + within
    while True:
        result = await condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


async def send(db: Database, account_id: str, event_type: str, **data: Any) -> str:
    """Emit `event_type` for the account with data `{"id": "pay_1", **data}`; the event's id."""
    async with db.unit_of_work() as uow:
        return await emit(uow, account_id, event_type, {"id": "pay_1", **data})


async def delivery_of(db: Database, event_id: str) -> Any:
    """The one delivery row of `event_id`."""
    async with db.read() as conn:
        return (
            await conn.execute(select(deliveries).where(deliveries.c.event_id == event_id))
        ).one()


async def attempts_of(db: Database, delivery_id: str) -> list[Any]:
    """The delivery's attempt rows, oldest first."""
    async with db.read() as conn:
        rows = await conn.execute(
            select(attempts)
            .where(attempts.c.delivery_id == delivery_id)
            .order_by(attempts.c.attempted_at, attempts.c.id)
        )
        return list(rows)


async def settled(db: Database, event_id: str, wanted: str) -> Any:
    """Wait until the delivery of `event_id` has status `wanted`; its row."""

    async def check() -> Any:
        row = await delivery_of(db, event_id)
        return row if row.status == wanted else None

    return await until(check, what=f"delivery of {event_id} to be {wanted}")
