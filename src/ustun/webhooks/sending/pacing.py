"""Sending a rate-limited endpoint's deliveries at their claimed slots, without bursts.

A claim gives each delivery of a rate-limited endpoint its own send slot, `1 / rate_limit`
apart. A worker whose event loop stalls past several slots would send them all at once when it
resumes; a `Pacer` sends an endpoint's deliveries one after the other in slot order, each no
sooner after the previous one than their slots are apart (at most `MAX_LAG` late).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from ustun import clock

# How late a paced send may fall behind its slot (well inside any lease).
MAX_LAG = 1.0


class Pacer:
    """Per endpoint, the slot of this worker's latest paced send and when it went (monotonic)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[datetime, asyncio.Future[float]]] = {}

    async def wait(self, endpoint_id: str, slot: datetime) -> None:
        """Wait for `slot`, after the endpoint's previous send here and as far after it as their
        slots are apart (up to `MAX_LAG` late). Call in slot order, once per delivery."""
        previous = self._last.get(endpoint_id)
        sending: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._last[endpoint_id] = (slot, sending)
        try:
            if previous is not None:
                previous_slot, previous_sent = previous
                sent = await asyncio.shield(previous_sent)
                due = (slot - clock.now()).total_seconds()
                spaced = sent + (slot - previous_slot).total_seconds() - time.monotonic()
                delay = max(due, min(spaced, due + MAX_LAG))
            else:
                delay = (slot - clock.now()).total_seconds()
            if delay > 0:
                await asyncio.sleep(delay)
        finally:
            sending.set_result(time.monotonic())
