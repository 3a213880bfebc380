"""Token buckets, and the `RateLimit-Policy` / `RateLimit` fields that describe them.

The fields are those of draft-ietf-httpapi-ratelimit-headers-11 (May 2026; the syntax has
held since -08): each is a structured-field List of Items, a policy name (an sf-string) with
parameters.

    RateLimit-Policy: "default";q=200;w=2     quota q requests per window w seconds
    RateLimit: "default";r=150;t=1            r requests available within the next t seconds

A bucket holds at most `burst` tokens and gains `rate` tokens a second; a request takes one,
or is refused while there is less than one. The policy advertises `q=burst` per
`w=ceil(burst / rate)` seconds: the time an empty bucket takes to fill, so that a client that
keeps to it is never refused. `r` is the whole tokens left, and `t` the seconds until the next
one (rounded up): within them no more than `r` requests can pass, which is what the draft's
effective window says. On a refusal `t` is also the `Retry-After`, so the two name the same
moment (the draft: Retry-After SHOULD NOT come before the end of the effective window).

Sans-I/O: the caller passes the time in, in seconds on any clock that never goes back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

# RFC 9651 §3.3.1: an sf-integer has at most 15 digits.
MAX_SF_INTEGER = 999_999_999_999_999
DEFAULT_POLICY_NAME = "default"
# A token short by less than this still counts as whole: a client back exactly at Retry-After
# must not be refused over a rounding error of float arithmetic.
_SLACK = 1e-9


def _sf_string(value: str) -> str:
    """`value` as an RFC 9651 sf-string (printable ASCII only)."""
    if not all(" " <= ch <= "~" for ch in value):
        raise ValueError(f"a policy name must be printable ASCII: {value!r}")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _whole_seconds(seconds: float) -> int:
    """Seconds rounded up, as an sf-integer (capped at its largest value)."""
    return min(math.ceil(seconds), MAX_SF_INTEGER)


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """`rate` requests a second, in bursts of at most `burst`."""

    rate: float
    burst: int
    name: str = DEFAULT_POLICY_NAME
    _quoted: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number of requests a second: {self.rate}")
        if not 1 <= self.burst <= MAX_SF_INTEGER:
            raise ValueError(f"burst must be from 1 to {MAX_SF_INTEGER}: {self.burst}")
        object.__setattr__(self, "_quoted", _sf_string(self.name))

    @property
    def window(self) -> int:
        """Whole seconds an empty bucket takes to fill (at least 1): the policy's `w`."""
        return max(1, _whole_seconds(self.burst / self.rate))

    def policy_field(self) -> str:
        """The `RateLimit-Policy` field value."""
        return f"{self._quoted};q={self.burst};w={self.window}"

    def limit_field(self, decision: Decision) -> str:
        """The `RateLimit` field value after `decision`."""
        return f"{self._quoted};r={decision.remaining};t={_whole_seconds(decision.wait)}"


class Decision(NamedTuple):
    """The outcome of one request: whether it may pass, the whole tokens left (`r`), and the
    seconds until the next token (`t`; on a refusal, how long to wait before retrying)."""

    allowed: bool
    remaining: int
    wait: float


class TokenBucket:
    """One client's bucket, full when made at `now`."""

    __slots__ = ("tokens", "updated")

    def __init__(self, policy: RatePolicy, now: float) -> None:
        self.tokens = float(policy.burst)
        self.updated = now

    def level(self, policy: RatePolicy, now: float) -> float:
        """Tokens in the bucket at `now` (a time before the last one counts as no time passed)."""
        return min(float(policy.burst), self.tokens + max(0.0, now - self.updated) * policy.rate)

    def take(self, policy: RatePolicy, now: float) -> Decision:
        """Take a token for one request at `now`, or refuse it while there is less than one.

        On every request of the service: a few arithmetic operations, no call but the tuple's.
        """
        tokens = self.tokens
        if now > self.updated:
            tokens = min(tokens + (now - self.updated) * policy.rate, policy.burst)
            self.updated = now
        allowed = tokens >= 1.0 - _SLACK
        if allowed:
            tokens = tokens - 1.0 if tokens > 1.0 else 0.0
        self.tokens = tokens
        remaining = int(tokens)  # tokens >= 0: the floor
        return Decision(allowed, remaining, (remaining + 1 - tokens) / policy.rate)
