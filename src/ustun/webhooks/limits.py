"""Per-endpoint isolation: a cap on in-flight deliveries and an optional rate limit."""

from __future__ import annotations

import asyncio
import time


class RateLimit:
    """Evenly spaced send slots at `rate` per second (a token bucket with a burst of one)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._next = 0.0

    def delay(self) -> float:
        """Seconds until the next free slot (0 when one is free now)."""
        return max(0.0, self._next - time.monotonic())

    def reserve(self) -> float:
        """Take the next slot; return how long to wait for it."""
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + 1.0 / self.rate
        return slot - now


class Gate:
    """Admission to one endpoint: at most `cap` sends at once, spaced by its rate limit."""

    def __init__(self, cap: int, rate: float | None) -> None:
        self.cap = cap
        self.rate = rate
        self.held = 0
        self._sending = asyncio.Semaphore(cap)
        self.limit = RateLimit(rate) if rate else None

    def fits(self, cap: int, rate: float | None) -> bool:
        """Whether this gate still matches the endpoint's settings."""
        return (self.cap, self.rate) == (cap, rate)

    @property
    def saturated(self) -> bool:
        """Holding more than it may send at once: claim no more for now.

        Refilling at `cap` keeps up to one more round queued behind the ones being sent, so the
        endpoint never idles while the next claim runs, and nothing waits longer than one round.
        """
        return self.held > self.cap

    async def __aenter__(self) -> None:
        await self._sending.acquire()
        if self.limit is not None:
            await asyncio.sleep(self.limit.reserve())

    async def __aexit__(self, *_: object) -> None:
        self._sending.release()
