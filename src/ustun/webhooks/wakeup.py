"""The in-process wake-up: a committed event rings the bell, the dispatcher stops waiting."""

from __future__ import annotations

import asyncio


class Doorbell:
    """Fan-out of "there is new work" to every dispatcher in this process."""

    def __init__(self) -> None:
        self._listeners: set[asyncio.Event] = set()

    def subscribe(self, event: asyncio.Event) -> None:
        """Set `event` on every ring until `unsubscribe`."""
        self._listeners.add(event)

    def unsubscribe(self, event: asyncio.Event) -> None:
        """Stop setting `event`."""
        self._listeners.discard(event)

    def ring(self) -> None:
        """Wake every subscribed dispatcher."""
        for event in self._listeners:
            event.set()


doorbell = Doorbell()
# PostgreSQL channel the outbox notifies on commit; every dispatcher LISTENs on it.
CHANNEL = "ustun_webhooks"
