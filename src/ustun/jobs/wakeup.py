"""Waking this process's idle runners at once when a job is enqueued here.

Other processes' runners hear of it through their store's listener (PostgreSQL NOTIFY) or by
polling; see `ustun.store.listen`.
"""

from __future__ import annotations

from ustun.store.listen import Doorbell

doorbell = Doorbell()


async def wake_local() -> None:
    """Wake this process's runners (an after-commit hook of the enqueueing unit of work)."""
    doorbell.ring()
