"""A worker sends a rate-limited endpoint's slots spaced as claimed, even after a stall."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from ustun import clock
from ustun.webhooks.sending.pacing import MAX_LAG, Pacer


async def _sent_at(pacer: Pacer, endpoint_id: str, offsets: list[float]) -> list[float]:
    """When each paced send went, in seconds from now, for slots `offsets` from now."""
    start, now = time.monotonic(), clock.now()

    async def send(offset: float) -> float:
        await pacer.wait(endpoint_id, now + timedelta(seconds=offset))
        return time.monotonic() - start

    tasks = [asyncio.create_task(send(offset)) for offset in offsets]
    return list(await asyncio.gather(*tasks))


async def test_sends_wait_for_their_slots() -> None:
    got = await _sent_at(Pacer(), "we_1", [0.0, 0.1, 0.2])
    assert got == pytest.approx([0.0, 0.1, 0.2], abs=0.05)


async def test_slots_missed_in_a_stall_go_out_spaced_not_at_once() -> None:
    got = await _sent_at(Pacer(), "we_1", [-0.3, -0.2, -0.1])  # the loop stalled past them
    assert got == pytest.approx([0.0, 0.1, 0.2], abs=0.05)


async def test_endpoints_are_paced_apart_and_a_send_is_at_most_max_lag_late() -> None:
    pacer = Pacer()
    other = await _sent_at(pacer, "we_2", [-0.2])
    assert other == pytest.approx([0.0], abs=0.05)
    # Spaced, the second would go 0.7 s after the first: that is more than MAX_LAG past its slot.
    got = await _sent_at(pacer, "we_1", [-(MAX_LAG + 0.5), -(MAX_LAG - 0.2)])
    assert got == pytest.approx([0.0, 0.2], abs=0.05)
