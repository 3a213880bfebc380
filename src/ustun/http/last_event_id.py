"""The `Last-Event-ID` request header of an event-stream reconnection (WHATWG HTML §9.2.4).

The browser sends back the last `id:` it saw, verbatim. ustun's event ids are the versions of
the resource (a job's), so the header must be a non-negative decimal integer that fits a
signed 64-bit database column; anything else is refused before the stream starts.
"""

from __future__ import annotations

import re

from ustun.errors import InvalidLastEventId

HEADER = "last-event-id"
# Exclusive: ids are compared with BIGINT-sized columns; 2**63 overflows the drivers.
LIMIT = 2**63

# 1*DIGIT, ASCII only (`int()` would also take "+1", "1_0", " 1" and non-ASCII digits).
_DIGITS = re.compile(r"[0-9]+")
# RFC 9110 §5.5: a field value has no leading or trailing whitespace (OWS = SP / HTAB).
_OWS = " \t"


def parse_last_event_id(value: str | None) -> int:
    """The id the client saw last: 0 when absent or empty (start from the beginning), or raise."""
    raw = (value or "").strip(_OWS)
    if not raw:
        return 0
    if _DIGITS.fullmatch(raw) is None:
        raise InvalidLastEventId("Last-Event-ID must be an event id: a non-negative integer.")
    digits = raw.lstrip("0") or "0"
    if len(digits) > len(str(LIMIT)) or int(digits) >= LIMIT:
        raise InvalidLastEventId(f"Last-Event-ID must be less than {LIMIT}.")
    return int(digits)
