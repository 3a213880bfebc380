"""Test-only fault injection: hold a handler at a named point so a test can kill the process.

Inert unless `USTUN_FAULT_PAUSE` names the point (only crash tests set it): the handler then
touches the file named by `USTUN_FAULT_SIGNAL` and waits forever, holding its transaction.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


async def pause_point(name: str) -> None:
    """Return at once, unless a test asked to freeze here."""
    if os.environ.get("USTUN_FAULT_PAUSE") != name:
        return
    await asyncio.to_thread(Path(os.environ["USTUN_FAULT_SIGNAL"]).touch)
    await asyncio.Event().wait()
