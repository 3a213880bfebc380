"""`Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, to a number of seconds."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# Retry-After = HTTP-date / delay-seconds
# delay-seconds = 1*DIGIT

MAX_RETRY_AFTER = 2.0**31
"""Seconds (about 68 years): the longest wait a `Retry-After` is read as; more is this.

delay-seconds has no upper bound in RFC 9110 §10.2.3, so a value of any length is well-formed
and means "not soon". RFC 9111 §1.2.2 settles the same question for delta-seconds: a value too
large to represent is taken as 2^31. Clamping (rather than calling the value malformed) keeps a
server's "wait" a wait: None would send the caller back to its own, shorter, backoff. Callers
cap the result further (the client at `Backoff.retry_after_cap`, webhook deliveries at twice
their scheduled delay).
"""
_MAX_DIGITS = len(str(int(MAX_RETRY_AFTER)))  # longer without leading zeros: over the cap


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait, in `[0, MAX_RETRY_AFTER]`; None when absent or malformed (then use your
    backoff). Total: no header value raises.

    An HTTP-date that names no representable time (out of `datetime`'s range, second 99…) is
    malformed; one in the past means no wait.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        digits = value.lstrip("0")
        if len(digits) > _MAX_DIGITS:
            return MAX_RETRY_AFTER
        return min(float(int(digits or "0")), MAX_RETRY_AFTER)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:
        # RFC 9110 §5.6.7: HTTP-dates are always GMT; a zone-less one is taken as such.
        moment = moment.replace(tzinfo=UTC)
    delta = (moment - (now or datetime.now(UTC))).total_seconds()
    return min(max(0.0, delta), MAX_RETRY_AFTER)


def format_retry_after(seconds: float) -> str:
    """Render a delay as delay-seconds, rounded up so a client never comes back too early."""
    whole = int(seconds)
    return str(whole + 1 if seconds > whole else max(0, whole))
