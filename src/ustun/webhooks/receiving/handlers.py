"""One handler registry for every transport a receiver listens on (HTTP, RabbitMQ, NATS).

    handlers = Handlers()

    @handlers.on("payment.*")
    async def paid(event: dict) -> None: ...

The HTTP receiver and the broker consumers take the same `Handlers` and the same inbox, so an
event that reaches a receiver by several paths runs its handler once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any

from ustun.defaults import DEFAULT_HANDLER_ATTEMPTS, DEFAULT_HANDLER_BACKOFF
from ustun.http.backoff import NO_JITTER, backoff
from ustun.webhooks.patterns import matches
from ustun.webhooks.receiving.inbox import Inbox

log = logging.getLogger("ustun.webhooks.receiving.handlers")

Handler = Callable[[dict[str, Any]], Awaitable[None]]


class Handlers:
    """Handlers by event type (`payment.*` and `*` allowed), each run with retries and backoff."""

    def __init__(
        self, *, attempts: int = DEFAULT_HANDLER_ATTEMPTS, backoff: float = DEFAULT_HANDLER_BACKOFF
    ) -> None:
        self.attempts = attempts
        self.backoff = backoff
        self._handlers: list[tuple[tuple[str, ...], Handler]] = []

    def on(self, *event_types: str) -> Callable[[Handler], Handler]:
        """Register a handler for these types (all of them when none is given)."""

        def register(handler: Handler) -> Handler:
            self._handlers.append((event_types or ("*",), handler))
            return handler

        return register

    def handler_for(self, event_type: str) -> Handler | None:
        """The first handler registered for `event_type`, or None."""
        for patterns, handler in self._handlers:
            if matches(patterns, event_type):
                return handler
        return None

    async def handle(
        self, inbox: Inbox, webhook_id: str, event_type: str, event: dict[str, Any]
    ) -> bool:
        """Run the event's handler (retried), then mark it done or failed in `inbox`; True if done.

        Call it only for an id this caller has claimed in `inbox`.
        """
        handler = self.handler_for(event_type)
        error = ""
        for attempt in range(self.attempts):
            try:
                if handler is not None:
                    await handler(event)
                await inbox.done(webhook_id)
                return True
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "handler for %s %s failed (attempt %d): %s",
                    event_type,
                    webhook_id,
                    attempt + 1,
                    error,
                )
                await asyncio.sleep(backoff(attempt + 1, base=self.backoff, jitter=NO_JITTER))
        await inbox.failed(webhook_id, error)
        return False


def load(path: str) -> Handlers:
    """The `Handlers` at `module:attribute` (as `ustun reconcile --handlers` names it)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected `module:attribute`, got {path!r}")
    found = getattr(import_module(module_name), attribute, None)
    if not isinstance(found, Handlers):
        raise ValueError(f"{path} is not a ustun.webhooks.Handlers")
    return found
