"""HTTP-date (RFC 9110 §5.6.7): parse all three formats, format the preferred one. And the one
parser of RFC 3339 date-times (§5.6), the timestamps a client sends in JSON and queries.

Each regex sits under the ABNF rule it encodes. Names of days and months are case-sensitive
(`%s"…"`). Deliberate leniency, all allowed by §5.6.7: the day name is not checked against
the date, and a leap second (`second = 60`) is read as :59 because `datetime` has no :60
(in RFC 3339 date-times too).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

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
    return (
        f"{day}, {moment.day:02d} {MONTHS[moment.month - 1]} {moment.year:04d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d} GMT"
    )


# date-time     = full-date "T" full-time     ; "T" and "Z" may be lower case, "T" a space (§5.6)
# full-date     = date-fullyear "-" date-month "-" date-mday
# full-time     = partial-time time-offset
# partial-time  = time-hour ":" time-minute ":" time-second [time-secfrac]
# time-offset   = "Z" / time-numoffset ; time-numoffset = ("+" / "-") time-hour ":" time-minute
# An HTML local date-time (`<input type="datetime-local">`) is the same without the offset,
# and with the seconds optional.
_DATE_TIME = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})[Tt ]"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})(?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]+))?)?"
    r"(?P<offset>[Zz]|(?P<sign>[+-])(?P<off_hour>[0-9]{2}):(?P<off_minute>[0-9]{2}))?"
)
RFC3339_EXAMPLE = "2026-12-01T00:00:00Z"


def parse_rfc3339(value: str, *, local_as_utc: bool = False) -> datetime:
    """The UTC moment an RFC 3339 date-time names; with `local_as_utc`, an HTML local date-time
    (no offset, seconds optional) is also taken, as UTC.

    `ValueError` saying why when it is not one, or when its moment in UTC falls outside the
    years 1-9999 (`0001-01-01T00:00:00+14:00` is a day before them).
    """
    match = _DATE_TIME.fullmatch(value)
    if match is None or (not local_as_utc and None in (match["second"], match["offset"])):
        raise ValueError(f"expected an RFC 3339 date-time with an offset, e.g. {RFC3339_EXAMPLE}")
    offset = UTC
    if match["sign"] is not None:
        hours, minutes = int(match["off_hour"]), int(match["off_minute"])
        if hours > 23 or minutes > 59:
            raise ValueError("the offset must be at most 23:59")
        size = timedelta(hours=hours, minutes=minutes)
        offset = timezone(-size if match["sign"] == "-" else size)
    try:
        moment = datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            min(int(match["second"] or 0), _LEAP_SECOND - 1),
            int((match["fraction"] or "0")[:6].ljust(6, "0")),
            tzinfo=offset,
        )
    except ValueError:
        raise ValueError(f"not a date and time of the calendar: {value!r}") from None
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("the moment must fall within the years 0001-9999 in UTC") from None
