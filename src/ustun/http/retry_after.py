"""`Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, to a number of seconds."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# Retry-After = HTTP-date / delay-seconds
# delay-seconds = 1*DIGIT


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait, never negative; None when absent or malformed (then use your backoff)."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value))
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        # RFC 9110 §5.6.7: HTTP-dates are always GMT; a zone-less one is taken as such.
        moment = moment.replace(tzinfo=UTC)
    delta = (moment - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, delta)


def format_retry_after(seconds: float) -> str:
    """Render a delay as delay-seconds, rounded up so a client never comes back too early."""
    whole = int(seconds)
    return str(whole + 1 if seconds > whole else max(0, whole))
