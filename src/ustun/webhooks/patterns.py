"""Event-type filters of an endpoint: exact names, `prefix.*` wildcards and `*`."""

from __future__ import annotations

import re
from collections.abc import Iterable

# An event type is dot-separated lowercase words; a pattern may end in `.*` or be `*`.
PATTERN = re.compile(r"^(\*|[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*(\.\*)?)$")


def is_pattern(text: str) -> bool:
    """Whether `text` is a valid filter."""
    return PATTERN.fullmatch(text) is not None


def matches(patterns: Iterable[str], event_type: str) -> bool:
    """Whether any filter selects `event_type`."""
    for pattern in patterns:
        if pattern == "*" or pattern == event_type:
            return True
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            return True
    return False
