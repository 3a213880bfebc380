"""The handler registry a receiver runs events through, whatever brought them: an HTTP
delivery (`WebhookReceiver`) or the provider's event feed (`Reconciler`).

One registry, shared, so an event runs the same code by either path; the inbox decides that
it runs once (see `inbox`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ustun.http.backoff import NO_JITTER, backoff
from ustun.webhooks.patterns import matches

if TYPE_CHECKING:
    from ustun.webhooks.inbox import Inbox

log = logging.getLogger("ustun.webhooks.receiver")

Handler = Callable[[dict[str, Any]], Awaitable[None]]
DEFAULT_ATTEMPTS = 5
DEFAULT_BACKOFF = 0.5


class Handlers:
    """Handlers by event type (`payment.*` and `*` allowed), each retried with backoff."""

    def __init__(
        self, *, attempts: int = DEFAULT_ATTEMPTS, backoff: float = DEFAULT_BACKOFF
    ) -> None:
        self.attempts = attempts
        self.backoff = backoff
        self._handlers: list[tuple[tuple[str, ...], Handler]] = []

    def on(self, *event_types: str) -> Callable[[Handler], Handler]:
        """Register a handler for these types (`payment.*` and `*` allowed; none: every type)."""

        def register(handler: Handler) -> Handler:
            self._handlers.append((event_types or ("*",), handler))
            return handler

        return register

    def handler_for(self, event_type: str) -> Handler | None:
        """The first registered handler whose patterns match `event_type`."""
        for patterns, handler in self._handlers:
            if matches(patterns, event_type):
                return handler
        return None

    async def run(
        self, inbox: Inbox, webhook_id: str, event_type: str, event: dict[str, Any]
    ) -> None:
        """Run the handler of an event the inbox has claimed, then mark it done (or failed)."""
        handler = self.handler_for(event_type)
        error = ""
        for attempt in range(self.attempts):
            try:
                if handler is not None:
                    await handler(event)
                await inbox.done(webhook_id)
                return
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


def load(path: str) -> Handlers:
    """The `Handlers` at `module:attribute` (as `ustun reconcile --handlers` names it)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected `module:attribute`, got {path!r}")
    found = getattr(import_module(module_name), attribute, None)
    if not isinstance(found, Handlers):
        raise ValueError(f"{path} is not a ustun.webhooks.Handlers")
    return found
