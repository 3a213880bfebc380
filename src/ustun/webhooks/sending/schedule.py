"""When to try a delivery again: its scheduled delay ±20 %, or a `Retry-After` clamped."""

from __future__ import annotations

import random
from collections.abc import Sequence

from ustun.http.backoff import TWENTY_PERCENT_JITTER, backoff

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
    return backoff(base=scheduled, jitter=TWENTY_PERCENT_JITTER, rand=(rng or random).random)
