"""The per-address limit on failed authentications, on a clock the test moves."""

from __future__ import annotations

from ustun.service.plumbing.auth_failures import FailureLimiter, client_bucket


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_past_the_limit_failures_get_429_until_the_window_ends() -> None:
    clock = Clock()
    limiter = FailureLimiter(3, 60, clock=clock)
    for _ in range(2):
        assert limiter.failed("192.0.2.1") is None
    assert limiter.retry_after("192.0.2.1") is None
    clock.now += 10
    assert limiter.failed("192.0.2.1") is None  # the third failure itself is still a 401
    assert limiter.retry_after("192.0.2.1") == 50
    refusal = limiter.failed("192.0.2.1")
    assert refusal is not None
    assert refusal.slug == "rate-limited"
    assert refusal.headers == {"retry-after": "50"}
    assert limiter.retry_after("192.0.2.2") is None

    clock.now += 49.5
    assert limiter.retry_after("192.0.2.1") == 0.5
    late = limiter.failed("192.0.2.1")
    assert late is not None
    assert late.headers == {"retry-after": "1"}  # rounded up: never back too early
    clock.now += 0.5
    assert limiter.retry_after("192.0.2.1") is None
    assert limiter.failed("192.0.2.1") is None  # a new window, counting from one
    assert limiter.retry_after("192.0.2.1") is None


def test_an_ipv6_client_counts_by_its_64() -> None:
    assert client_bucket("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_bucket("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_bucket("192.0.2.1") == "192.0.2.1"
    assert client_bucket(None) == "unknown"
    limiter = FailureLimiter(2, 60, clock=Clock())
    limiter.failed("2001:db8:1:2::1")
    limiter.failed("2001:db8:1:2::2")
    assert limiter.retry_after("2001:db8:1:2::3") is not None
    assert limiter.retry_after("2001:db8:1:3::1") is None


def test_memory_is_bounded_and_the_oldest_window_goes_first() -> None:
    clock = Clock()
    limiter = FailureLimiter(1, 60, max_tracked=100, clock=clock)
    limiter.failed("192.0.2.1")
    clock.now += 1
    for n in range(1, 250):
        limiter.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(limiter._windows) == 100
    assert limiter.retry_after("192.0.2.1") is None  # dropped first
    assert limiter.retry_after("10.0.0.249") is not None  # the newest is kept
