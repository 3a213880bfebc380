import re
import time
from datetime import UTC, datetime

from ustun import clock, ids


def test_ids_are_prefixed_and_url_safe() -> None:
    value = ids.new_id("pay")
    assert re.fullmatch(r"pay_[0-9A-HJKMNP-TV-Z]{26}", value)


def test_ids_increase_within_a_process() -> None:
    made = [ids.new_id("x") for _ in range(10_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_an_id_starts_with_its_unix_milliseconds_in_crockford_base32() -> None:
    before = time.time_ns() // 1_000_000
    digits = ids.new_id("x").removeprefix("x_")
    after = time.time_ns() // 1_000_000
    made = 0
    for digit in digits[:10]:
        made = made * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(digit)
    assert before <= made <= after


def test_clock_is_utc_aware_and_rfc3339() -> None:
    moment = clock.now()
    assert moment.tzinfo is not None
    assert moment.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    fixed = datetime(2026, 6, 1, 12, 30, 5, 123456, tzinfo=UTC)
    assert clock.rfc3339(fixed) == "2026-06-01T12:30:05.123Z"
