"""A webhook receiver for Starlette / FastAPI: verify, deduplicate, answer 2xx, handle later.

    receiver = WebhookReceiver("whsec_…", inbox=DatabaseInbox(db))

    @receiver.on("payment.succeeded")
    async def paid(event: dict) -> None: ...

    app.add_route("/webhooks", receiver, methods=["POST"])   # or app.mount(...)

A verified, new event is recorded in the inbox and answered `204` at once; its handler runs in
the background, retried with backoff on failure (never pushed back on the sender). A duplicate
`webhook-id` is answered `200` without running anything. A repeated `webhook-*` header is
refused (`400`), and a body over `MAX_BODY` is refused (`413`) without reading past the limit.
The inbox is prepared (its table checked or created) once, before the first delivery is claimed.
Pass `handlers=` to share one `Handlers` registry with the broker consumers (`consumers`).
Its handlers (`receiver.handlers`) may be shared with a `Reconciler`, which feeds the events
the receiver missed through the same inbox.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ustun.defaults import (
    DEFAULT_HANDLER_ATTEMPTS,
    DEFAULT_HANDLER_BACKOFF,
    DEFAULT_SIGNATURE_TOLERANCE,
)
from ustun.errors import SignatureError
from ustun.http.signature import Verifier, verifiers
from ustun.problems import problem_of, problem_response
from ustun.webhooks.receiving.handlers import Handler, Handlers
from ustun.webhooks.receiving.inbox import Inbox
from ustun.webhooks.receiving.verify import verify_delivery

log = logging.getLogger("ustun.webhooks.receiving.receiver")

MAX_BODY = 1024 * 1024


class WebhookReceiver:
    """An ASGI app that receives Standard Webhooks and runs one handler per event type.

    `secret` is the endpoint's `whsec_…` secret or `whpk_…` public key, or several (while
    rotating); anything else is a `ValueError` here, not a refusal of every delivery later.
    `handlers` is a registry to share (with a `Reconciler`); without one the receiver makes its
    own, retrying each handler `attempts` times from `backoff` seconds. `problem_base` prefixes
    the `type` of its problems (`<problem_base>/problems/<slug>`; relative by default).
    """

    def __init__(
        self,
        secret: Verifier | str | Iterable[Verifier | str],
        *,
        inbox: Inbox,
        handlers: Handlers | None = None,
        tolerance: float = DEFAULT_SIGNATURE_TOLERANCE,
        attempts: int = DEFAULT_HANDLER_ATTEMPTS,
        backoff: float = DEFAULT_HANDLER_BACKOFF,
        problem_base: str = "",
    ) -> None:
        self.secrets = verifiers(secret)
        self.inbox = inbox
        self.tolerance = tolerance
        self.handlers = handlers or Handlers(attempts=attempts, backoff=backoff)
        self.problem_base = problem_base
        self._running: set[asyncio.Task[bool]] = set()
        self._prepared = False

    def on(self, *event_types: str) -> Callable[[Handler], Handler]:
        """Register a handler for these types (`payment.*` and `*` allowed)."""
        return self.handlers.on(*event_types)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._respond(Request(scope, receive))
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        if request.method != "POST":
            return Response(status_code=405, headers={"allow": "POST"})
        body = await _body(request, MAX_BODY)
        if body is None:
            # Closing the connection stops a client that is still sending (RFC 9110 §15.5.14).
            return problem_response(
                "payload-too-large",
                f"Webhook bodies are limited to {MAX_BODY} bytes.",
                base=self.problem_base,
                headers={"connection": "close"},
            )
        try:
            delivery = verify_delivery(self.secrets, request.headers, body, self.tolerance)
        except SignatureError as exc:
            log.warning("refused a webhook: %s", exc)
            refused = problem_of(exc)
            return problem_response(refused.slug, refused.detail, base=self.problem_base)
        webhook_id, event = delivery.id, delivery.event
        event_type = str(event.get("type", ""))
        if not self._prepared:
            await self.inbox.prepare()
            self._prepared = True
        if not await self.inbox.claim(webhook_id, event_type):
            return JSONResponse({"duplicate": True}, status_code=200)
        task = asyncio.create_task(self.handlers.handle(self.inbox, webhook_id, event_type, event))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return Response(status_code=204)

    async def drain(self) -> None:
        """Wait for every handler in progress (call on shutdown)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


async def _body(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is known to be over `limit` (not read further)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
