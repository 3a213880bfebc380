"""HTTP-date (RFC 9110 §5.6.7): parse all three formats, format the preferred one.

Each regex sits under the ABNF rule it encodes. Names of days and months are case-sensitive
(`%s"…"`). Deliberate leniency, all allowed by §5.6.7: the day name is not checked against
the date, and a leap second (`second = 60`) is read as :59 because `datetime` has no :60.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# day-name     = %s"Mon" / %s"Tue" / %s"Wed" / %s"Thu" / %s"Fri" / %s"Sat" / %s"Sun"
DAY_NAME = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
# day-name-l   = %s"Monday" / %s"Tuesday" / %s"Wednesday" / %s"Thursday" / %s"Friday"
#              / %s"Saturday" / %s"Sunday"
DAY_NAME_L = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
# month        = %s"Jan" / %s"Feb" / %s"Mar" / %s"Apr" / %s"May" / %s"Jun"
#              / %s"Jul" / %s"Aug" / %s"Sep" / %s"Oct" / %s"Nov" / %s"Dec"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH = rf"(?P<month>{'|'.join(MONTHS)})"
# time-of-day  = hour ":" minute ":" second
# hour = 2DIGIT ; minute = 2DIGIT ; second = 2DIGIT
TIME_OF_DAY = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
# GMT          = %s"GMT"
GMT = "GMT"

# IMF-fixdate  = day-name "," SP date1 SP time-of-day SP GMT
# date1        = day SP month SP year   ; e.g., 02 Jun 1982
# day = 2DIGIT ; year = 4DIGIT
IMF_FIXDATE = re.compile(
    rf"{DAY_NAME}, (?P<day>[0-9]{{2}}) {MONTH} (?P<year>[0-9]{{4}}) {TIME_OF_DAY} {GMT}"
)
# rfc850-date  = day-name-l "," SP date2 SP time-of-day SP GMT
# date2        = day "-" month "-" 2DIGIT   ; e.g., 02-Jun-82
RFC850_DATE = re.compile(
    rf"{DAY_NAME_L}, (?P<day>[0-9]{{2}})-{MONTH}-(?P<year>[0-9]{{2}}) {TIME_OF_DAY} {GMT}"
)
# asctime-date = day-name SP date3 SP time-of-day SP year
# date3        = month SP ( 2DIGIT / ( SP DIGIT ))   ; e.g., Jun  2
ASCTIME_DATE = re.compile(
    rf"{DAY_NAME} {MONTH} (?P<day>[0-9]{{2}}| [0-9]) {TIME_OF_DAY} (?P<year>[0-9]{{4}})"
)
# HTTP-date    = IMF-fixdate / obs-date
# obs-date     = rfc850-date / asctime-date
_FORMATS = (IMF_FIXDATE, RFC850_DATE, ASCTIME_DATE)

_LEAP_SECOND = 60


def _full_year(two_digits: int, now: datetime) -> int:
    """§5.6.7: a two-digit year more than 50 years in the future is the most recent past one."""
    year = now.year - now.year % 100 + two_digits
    return year - 100 if year > now.year + 50 else year


def parse_http_date(value: str, *, now: datetime | None = None) -> datetime | None:
    """The UTC moment an HTTP-date names, or None when `value` is not a valid HTTP-date."""
    value = value.strip(" \t")
    for pattern in _FORMATS:
        match = pattern.fullmatch(value)
        if match is not None:
            break
    else:
        return None
    year = int(match["year"])
    if pattern is RFC850_DATE:
        year = _full_year(year, now or datetime.now(UTC))
    second = min(int(match["second"]), _LEAP_SECOND - 1)
    try:
        return datetime(
            year,
            MONTHS.index(match["month"]) + 1,
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            second,
            tzinfo=UTC,
        )
    except ValueError:
        return None


def format_http_date(moment: datetime) -> str:
    """Render a moment as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), whole seconds."""
    moment = moment.astimezone(UTC)
    day = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[moment.weekday()]
    return f"{day}, {moment.day:02d} {MONTHS[moment.month - 1]} {moment:%Y %H:%M:%S} GMT"
