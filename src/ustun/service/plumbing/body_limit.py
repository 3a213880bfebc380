"""One limit on every request body (`USTUN_MAX_BODY`): 413 `payload-too-large` above it.

Pure ASGI: a declared Content-Length above the limit is refused before a byte of the body is
read; a body without one (chunked) is counted as it arrives and reading stops at the limit,
so the application never holds more than the limit of it.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun.errors import UstunError
from ustun.service.plumbing.problems import problem_response


class BodyTooLarge(HTTPException, UstunError):
    """Raised by `receive` past the limit; an HTTPException, so FastAPI's body reading and the
    error handlers pass it on as the 413 (any other error there would become a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"The request body is larger than {limit} bytes, the most this server accepts."
        )


class BodyLimitMiddleware:
    """Refuse request bodies larger than `max_body` bytes with 413, reading no further."""

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if length.isdigit() and int(length) > self.max_body:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise BodyTooLarge(self.max_body)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = BodyTooLarge(self.max_body)
        response = problem_response(Request(scope), "payload-too-large", refusal.detail)
        await response(scope, receive, send)
