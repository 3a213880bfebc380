"""`every`: a worker loop that does one piece of work, then waits, until it is stopped.

The worker (`ustun.service.runtime.worker`) runs each loop it is given with its stopping event;
the sweepers of the pillars are this loop around their own sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

Loop = Callable[[asyncio.Event], Awaitable[None]]


def every(interval: float, work: Callable[[], Awaitable[object]]) -> Loop:
    """A loop that awaits `work()`, then waits `interval` seconds (or until stopped), until
    the stopping event is set."""

    async def loop(stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await work()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)

    return loop
