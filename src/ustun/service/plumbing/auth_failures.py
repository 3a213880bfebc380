"""Failed authentications per client address: past a limit, the address waits (429).

Counted in this process's memory (each `ustun serve` process counts on its own), in fixed
windows: an address's first failure opens a window of `window` seconds, and once `limit`
failures fall in it, the address is refused until the window ends. At most `max_tracked`
addresses are kept; past that the oldest window is dropped first. An IPv6 client counts by
its /64, the block one host usually holds.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

from ustun.http.errors import ProblemError
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
    """Counts failed authentications per client; `retry_after` says how long one must wait."""

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
        """Seconds until `host` may try again, or None when it is not blocked."""
        entry = self._windows.get(client_bucket(host))
        if entry is None or entry[1] < self.limit:
            return None
        left = entry[0] + self.window - self._clock()
        return left if left > 0 else None

    def refusal(self, host: str | None) -> ProblemError | None:
        """The 429 `rate-limited` problem (with `Retry-After`) for a blocked `host`, else None."""
        wait = self.retry_after(host)
        if wait is None:
            return None
        seconds = format_retry_after(wait)
        return ProblemError(
            "rate-limited",
            f"Too many failed authentications from your address; try again in {seconds} s.",
            headers={"retry-after": seconds},
        )

    def failed(self, host: str | None) -> None:
        """Count one failed authentication of `host`."""
        bucket, now = client_bucket(host), self._clock()
        entry = self._windows.get(bucket)
        if entry is not None and now - entry[0] < self.window:
            entry[1] += 1
            return
        self._windows.pop(bucket, None)
        while len(self._windows) >= self.max_tracked:
            del self._windows[next(iter(self._windows))]
        self._windows[bucket] = [now, 1]
