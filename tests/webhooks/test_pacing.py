"""A worker sends a rate-limited endpoint's slots spaced as claimed, even after a stall."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ustun import clock
from ustun.webhooks.pacing import MAX_LAG, Pacer


def test_the_first_send_waits_for_its_slot() -> None:
    now = clock.now()
    assert Pacer().delay("we_1", now + timedelta(seconds=0.3), now) == pytest.approx(0.3)


def test_slots_missed_in_a_stall_go_out_spaced_not_at_once() -> None:
    pacer = Pacer()
    slot = clock.now() - timedelta(seconds=0.4)  # the loop stalled past this slot and the next
    pacer.sent("we_1", slot)
    now = slot + timedelta(seconds=0.4)
    later = pacer.delay("we_1", slot + timedelta(seconds=0.25), now)
    assert later == pytest.approx(0.25, abs=0.05)
    assert pacer.delay("we_2", slot + timedelta(seconds=0.25), now) < 0  # another endpoint


def test_a_send_falls_no_more_than_max_lag_behind_its_slot() -> None:
    pacer = Pacer()
    slot = clock.now() - timedelta(seconds=10)
    pacer.sent("we_1", slot)
    now = slot + timedelta(seconds=10)
    wait = pacer.delay("we_1", slot + timedelta(seconds=5), now)
    assert wait == pytest.approx(MAX_LAG - 5, abs=0.05)
