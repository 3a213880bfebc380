import random

from ustun.webhooks.sending.schedule import retry_delay

SCHEDULE = (5.0, 300.0, 1800.0)


def test_jitter_stays_within_twenty_percent() -> None:
    rng = random.Random(7)
    delays = [retry_delay(SCHEDULE, 2, rng=rng) for _ in range(500)]
    assert all(d is not None and 240 <= d <= 360 for d in delays)
    assert len({round(d or 0) for d in delays}) > 50


def test_no_retry_left_after_the_schedule() -> None:
    assert retry_delay(SCHEDULE, 3) is not None
    assert retry_delay(SCHEDULE, 4) is None
    assert retry_delay(SCHEDULE, 0) is None


def test_retry_after_is_clamped_to_twice_the_schedule() -> None:
    assert retry_delay(SCHEDULE, 1, retry_after=7) == 7
    assert retry_delay(SCHEDULE, 1, retry_after=3600) == 10
    assert retry_delay(SCHEDULE, 1, retry_after=0) == 0
