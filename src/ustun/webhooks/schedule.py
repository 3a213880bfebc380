"""When to try again: the retry schedule with ±20 % jitter, and `Retry-After` clamping."""

from __future__ import annotations

import random
from collections.abc import Sequence

JITTER = 0.2
# Statuses whose Retry-After a sender honours (RFC 6585 §4, RFC 9110 §15.6.4).
RETRY_AFTER_STATUSES = frozenset({429, 503})


def retry_delay(
    schedule: Sequence[float],
    attempts_made: int,
    *,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float | None:
    """Seconds until the next attempt after `attempts_made` attempts; None when none is left.

    A `retry_after` from the receiver replaces the jittered delay, clamped to at most twice the
    scheduled one so a receiver cannot park a delivery for days.
    """
    if attempts_made < 1 or attempts_made > len(schedule):
        return None
    scheduled = schedule[attempts_made - 1]
    if retry_after is not None:
        return min(max(retry_after, 0.0), 2 * scheduled)
    return scheduled * (rng or random).uniform(1 - JITTER, 1 + JITTER)
