"""`LimitedProtocol` under uvicorn in this process, with an app the test controls: the body
timeout counts the client's time, never the app's."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from ustun.service.runtime.server import ServerLimits, limited_protocol

BODY_TIMEOUT = 0.3
BODY = b"x" * 300_000  # past uvicorn's high-water mark: it stops reading until the app takes it


class SlowReader:
    """An ASGI app that reads the body only once `go` is set, then answers its length."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.called = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        self.called.set()
        await self.go.wait()
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        answer = str(size).encode()
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


@contextlib.asynccontextmanager
async def serving(app: SlowReader) -> AsyncIterator[int]:
    """uvicorn with `LimitedProtocol` on a free port, for the body of the `async with`."""
    limits = ServerLimits(
        max_header_bytes=65_536, max_headers=100, header_timeout=5, body_timeout=BODY_TIMEOUT
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until uvicorn accepts them
    config = uvicorn.Config(
        app, http=limited_protocol(limits), lifespan="off", log_config=None, ws="none"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_a_body_the_app_has_not_taken_yet_is_not_timed_against_the_client() -> None:
    app = SlowReader()
    async with serving(app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = f"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: {len(BODY)}\r\n\r\n"
        writer.write(request.encode() + BODY)
        await writer.drain()
        await asyncio.wait_for(app.called.wait(), 5)
        # Several body timeouts pass while uvicorn holds the rest back for the app: still open.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 4 * BODY_TIMEOUT)
        app.go.set()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        size = await asyncio.wait_for(reader.readexactly(len(str(len(BODY)))), 5)
        writer.close()
    assert head.startswith(b"HTTP/1.1 200 ")
    assert size == str(len(BODY)).encode()
