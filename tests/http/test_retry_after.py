from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.http.retry_after import MAX_RETRY_AFTER, format_retry_after, parse_retry_after

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


@pytest.mark.parametrize(
    "value",
    [
        "9" * 11,
        "9" * 400,  # float(int(...)) overflowed
        "9" * 5000,  # past int()'s 4,300-digit limit
        "Fri, 31 Dec 9999 23:59:59 GMT",
    ],
)
def test_a_huge_wait_is_clamped_to_the_maximum(value: str) -> None:
    """RFC 9111 §1.2.2's rule for delta-seconds: too large to represent is 2^31."""
    assert parse_retry_after(value, now=NOW) == MAX_RETRY_AFTER


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("0" * 5000 + "7", 7.0), ("2147483648", MAX_RETRY_AFTER), ("2147483647", 2147483647.0)],
)
def test_digits_are_read_whatever_their_length(value: str, seconds: float) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "Mon, 01 Jun 2026 12:00:" + "9" * 400 + " GMT",  # an OverflowError inside the date
        "Mon, 01 Jan 99999 00:00:00 GMT",
        "Mon, 01 Jan 2026 99:00:00 GMT",
        "Mon, 01 Jan 2026 00:00:00 +9999",
    ],
)
def test_a_date_that_names_no_time_is_malformed(value: str) -> None:
    assert parse_retry_after(value, now=NOW) is None


NUMBERS = st.one_of(st.integers(0, 100_000), st.integers(0, 10**450))
DATE_PARTS = st.one_of(
    st.sampled_from(["Mon,", "GMT", "UTC", "-0000", "+1400", "-1400", "Jan", "Dec", ":", " "]),
    st.from_regex(r"\A[0-9]{1,8}\Z"),
    st.from_regex(r"\A[0-9]{1,4}:[0-9]{1,4}:[0-9]{1,400}\Z"),
)


@given(
    st.one_of(
        st.text(),
        st.from_regex(r"\A\s*[0-9]{1,6000}\s*\Z"),
        st.lists(DATE_PARTS, max_size=8).map(" ".join),
        st.builds(
            "{}, {} {} {} {}:{}:{} {}".format,
            st.sampled_from(["Mon", "Monday", "Foo"]),
            NUMBERS,
            st.sampled_from(["Jan", "Dec", "Foo"]),
            NUMBERS,
            NUMBERS,
            NUMBERS,
            NUMBERS,
            st.sampled_from(["GMT", "-0000", "+1400", "-1400", "+9999", ""]),
        ),
    )
)
def test_never_raises_and_stays_in_bounds(value: str) -> None:
    seconds = parse_retry_after(value, now=NOW)
    assert seconds is None or 0.0 <= seconds <= MAX_RETRY_AFTER
