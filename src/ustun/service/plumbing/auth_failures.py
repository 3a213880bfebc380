"""Failed authentications per client address: past a limit, its failures are answered 429.

Counted in this process's memory (each `ustun serve` process counts on its own), in fixed
windows: an address's first failure opens a window of `window` seconds, and once `limit`
failures fall in it, every further failure of the address gets 429 `rate-limited` (instead of
401) until the window ends. Only failures are throttled, never credentials: a valid key is
accepted from any address, however many failures it has (many clients may share one address
behind a NAT). The 429 tells a client nothing the 401 would not have: either way its key is
not valid. At most `max_tracked` addresses are kept; past that the oldest window is dropped
first. An IPv6 client counts by its /64, the block one host usually holds.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

from ustun.errors import ProblemError
from ustun.http.retry_after import format_retry_after

MAX_TRACKED = 10_000


def client_bucket(host: str | None) -> str:
    """What failures are counted by: the IPv4 address, the IPv6 /64, or the raw host."""
    if host is None:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class FailureLimiter:
    """Counts failed authentications per client; `failed` says when one is past the limit."""

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        max_tracked: int = MAX_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.max_tracked = max_tracked
        self._clock = clock
        # bucket -> [window start, failures]; insertion order is the order windows started.
        self._windows: dict[str, list[float]] = {}

    def retry_after(self, host: str | None) -> float | None:
        """Seconds until `host`'s failures are answered 401 again, or None when they are now."""
        entry = self._windows.get(client_bucket(host))
        if entry is None or entry[1] < self.limit:
            return None
        left = entry[0] + self.window - self._clock()
        return left if left > 0 else None

    def failed(self, host: str | None) -> ProblemError | None:
        """Count one failed authentication of `host`. Past the limit, the 429 `rate-limited`
        problem (with `Retry-After`) to answer it with; else None (answer 401)."""
        wait = self.retry_after(host)
        self._count(host)
        if wait is None:
            return None
        seconds = format_retry_after(wait)
        return ProblemError(
            "rate-limited",
            f"Too many failed authentications from your address; try again in {seconds} s.",
            headers={"retry-after": seconds},
        )

    def _count(self, host: str | None) -> None:
        bucket, now = client_bucket(host), self._clock()
        entry = self._windows.get(bucket)
        if entry is not None and now - entry[0] < self.window:
            entry[1] += 1
            return
        self._windows.pop(bucket, None)
        while len(self._windows) >= self.max_tracked:
            del self._windows[next(iter(self._windows))]
        self._windows[bucket] = [now, 1]
