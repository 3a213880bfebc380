"""Sending a rate-limited endpoint's deliveries at their claimed slots, without bursts.

A claim gives each delivery of a rate-limited endpoint its own send slot, `1 / rate_limit`
apart. A worker whose event loop stalls past several slots would send them all at once when it
wakes; a `Pacer` keeps them as far apart as their slots instead, at most `MAX_LAG` late.
"""

from __future__ import annotations

import time
from datetime import datetime

# How late a paced send may fall behind its slot (well inside any lease).
MAX_LAG = 1.0


class Pacer:
    """Per endpoint, the latest slot this worker sent at and when (monotonic clock)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[datetime, float]] = {}

    def delay(self, endpoint_id: str, slot: datetime, now: datetime) -> float:
        """Seconds to wait before sending at `slot`: until the slot, and no sooner after the
        endpoint's previous send than their slots are apart (up to `MAX_LAG` late)."""
        wait = (slot - now).total_seconds()
        last = self._last.get(endpoint_id)
        if last is None:
            return wait
        last_slot, sent = last
        spaced = sent + (slot - last_slot).total_seconds() - time.monotonic()
        return max(wait, min(spaced, wait + MAX_LAG))

    def sent(self, endpoint_id: str, slot: datetime) -> None:
        """Record that the delivery of `slot` is being sent now."""
        last = self._last.get(endpoint_id)
        if last is None or slot >= last[0]:
            self._last[endpoint_id] = (slot, time.monotonic())
