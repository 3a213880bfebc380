"""RFC 9110 §5.6.7 HTTP-date: the preferred format and both obsolete ones."""

import email.utils
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.http.dates import format_http_date, parse_http_date, parse_rfc3339

NOV_6_1994 = datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate (the RFC's own examples)
        "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850 format
        "Sun Nov  6 08:49:37 1994",  # ANSI C's asctime() format
        " Sun, 06 Nov 1994 08:49:37 GMT\t",
    ],
)
def test_the_three_formats_name_the_same_moment(value: str) -> None:
    assert parse_http_date(value, now=datetime(2026, 1, 1, tzinfo=UTC)) == NOV_6_1994


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Sun, 06 Nov 1994 08:49:37",  # no GMT
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 +0000",
        "sun, 06 Nov 1994 08:49:37 GMT",  # case-sensitive names
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT",  # day = 2DIGIT
        "Sun,  06 Nov 1994 08:49:37 GMT",
        "Sun, 31 Feb 1994 08:49:37 GMT",  # no such day
        "Sun, 06 Nov 1994 24:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",  # asctime pads a one-digit day with a space
        "Sun, 06 Nov 1994 08:49:37 GMT, Mon, 07 Nov 1994 08:49:37 GMT",  # two members
        "1994-11-06T08:49:37Z",
        "784111777",
    ],
)
def test_rejects_what_is_not_an_http_date(value: str) -> None:
    assert parse_http_date(value) is None


@pytest.mark.parametrize(
    ("now", "expected_year"),
    [
        (datetime(2026, 1, 1, tzinfo=UTC), 1994),  # 2094 is > 50 years ahead
        (datetime(2060, 1, 1, tzinfo=UTC), 2094),  # 2094 is 34 years ahead: not in the past
        (datetime(1994, 1, 1, tzinfo=UTC), 1994),
    ],
)
def test_two_digit_years_within_fifty_years(now: datetime, expected_year: int) -> None:
    parsed = parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", now=now)
    assert parsed is not None
    assert parsed.year == expected_year


def test_a_leap_second_is_read_as_the_last_whole_second() -> None:
    assert parse_http_date("Wed, 31 Dec 2008 23:59:60 GMT") == datetime(
        2008, 12, 31, 23, 59, 59, tzinfo=UTC
    )


def test_formats_an_imf_fixdate_and_reads_it_back() -> None:
    moment = datetime(1994, 11, 6, 8, 49, 37, 654321, tzinfo=UTC)
    assert format_http_date(moment) == "Sun, 06 Nov 1994 08:49:37 GMT"
    assert parse_http_date(format_http_date(moment)) == NOV_6_1994
    assert format_http_date(datetime(2026, 6, 1, tzinfo=UTC)) == "Mon, 01 Jun 2026 00:00:00 GMT"


def test_a_year_before_1000_has_its_four_digits() -> None:
    """date1 = day SP month SP year, year = 4DIGIT (RFC 9110 §5.6.7); strftime's %Y wrote 999."""
    moment = datetime(999, 1, 1, tzinfo=UTC)
    assert format_http_date(moment) == "Tue, 01 Jan 0999 00:00:00 GMT"
    assert parse_http_date(format_http_date(moment)) == moment


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31)))
def test_agrees_with_the_standard_library(moment: datetime) -> None:
    moment = moment.replace(tzinfo=UTC, microsecond=0)
    text = format_http_date(moment)
    assert text == email.utils.format_datetime(moment, usegmt=True)
    assert parse_http_date(text) == moment == email.utils.parsedate_to_datetime(text)


@pytest.mark.parametrize(
    ("value", "moment"),
    [
        ("2026-12-01T00:00:00Z", datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01t09:30:00.5+09:30", datetime(2026, 12, 1, 0, 0, 0, 500_000, tzinfo=UTC)),
        ("2026-12-01 00:00:00.1234567-01:00", datetime(2026, 12, 1, 1, 0, 0, 123_456, tzinfo=UTC)),
        ("2016-12-31T23:59:60z", datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("0001-01-01T00:00:00-14:00", datetime(1, 1, 1, 14, tzinfo=UTC)),
        ("9999-12-31T23:59:59+14:00", datetime(9999, 12, 31, 9, 59, 59, tzinfo=UTC)),
    ],
)
def test_an_rfc3339_date_time_is_read_as_its_utc_moment(value: str, moment: datetime) -> None:
    assert parse_rfc3339(value) == moment
    assert parse_rfc3339(value).tzinfo is UTC


NOT_RFC3339 = "expected an RFC 3339 date-time with an offset"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0001-01-01T00:00:00+14:00", "years 0001-9999 in UTC"),
        ("9999-12-31T23:59:59-14:00", "years 0001-9999 in UTC"),
        ("0001-01-01T00:00:00.999999+00:01", "years 0001-9999 in UTC"),
        ("2026-02-29T00:00:00Z", "not a date and time of the calendar"),
        ("2026-12-01T24:00:00Z", "not a date and time of the calendar"),
        ("2026-12-01T00:00:00+24:00", "offset must be at most 23:59"),
        ("2026-12-01T00:00:00+01:60", "offset must be at most 23:59"),
        ("2026-12-01T00:00:00", NOT_RFC3339),
        ("2026-12-01T00:00Z", NOT_RFC3339),
        ("2026-12-01", NOT_RFC3339),
        ("1764547200", NOT_RFC3339),
        ("\uff12\uff10\uff12\uff16-12-01T00:00:00Z", NOT_RFC3339),
    ],
)
def test_anything_else_is_a_value_error_saying_why(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_rfc3339(value)


def test_an_html_local_date_time_is_read_as_utc_when_allowed() -> None:
    for value in ("2026-12-01T09:30", "2026-12-01T09:30:00", "2026-12-01T09:30:00.000"):
        assert parse_rfc3339(value, local_as_utc=True) == datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    with pytest.raises(ValueError, match="years 0001-9999 in UTC"):
        parse_rfc3339("0001-01-01T00:00:00+00:01", local_as_utc=True)


OFFSETS = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))


@given(st.datetimes(timezones=OFFSETS))
def test_any_isoformat_moment_reads_back_or_is_refused(moment: datetime) -> None:
    text = moment.isoformat()
    try:
        parsed = parse_rfc3339(text)
    except ValueError:
        return  # out of range in UTC: never another error
    assert parsed == moment
