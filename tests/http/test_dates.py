"""RFC 9110 §5.6.7 HTTP-date: the preferred format and both obsolete ones."""

import email.utils
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.http.dates import format_http_date, parse_http_date

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


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31)))
def test_agrees_with_the_standard_library(moment: datetime) -> None:
    moment = moment.replace(tzinfo=UTC, microsecond=0)
    text = format_http_date(moment)
    assert text == email.utils.format_datetime(moment, usegmt=True)
    assert parse_http_date(text) == moment == email.utils.parsedate_to_datetime(text)
