from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.http.retry_after import format_retry_after, parse_retry_after

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0", 0.0),
        ("120", 120.0),
        ("  7 ", 7.0),
        ("Mon, 01 Jun 2026 12:00:30 GMT", 30.0),
        ("Monday, 01-Jun-26 12:01:00 GMT", 60.0),  # obsolete RFC 850 form
        ("Mon Jun  1 12:00:05 2026", 5.0),  # asctime form
        ("Mon, 01 Jun 2026 11:00:00 GMT", 0.0),  # in the past: no wait
    ],
)
def test_parses_both_forms(value: str, seconds: float) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize("value", [None, "", "-1", "1.5", "soon", "٣", "Mon, 99 Foo 2026", "1e3"])
def test_malformed_values_are_none(value: str | None) -> None:
    assert parse_retry_after(value, now=NOW) is None


@pytest.mark.parametrize(("seconds", "text"), [(0, "0"), (1, "1"), (1.2, "2"), (29.999, "30")])
def test_format_rounds_up(seconds: float, text: str) -> None:
    assert format_retry_after(seconds) == text


@given(st.integers(min_value=0, max_value=10**9))
def test_delay_seconds_round_trip(n: int) -> None:
    assert parse_retry_after(format_retry_after(n)) == n
