"""The one clock: timezone-aware UTC now, and RFC 3339 formatting."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Format as RFC 3339 UTC with a `Z` suffix and millisecond precision."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rfc3339_or_none(moment: datetime | None) -> str | None:
    """`rfc3339`, with None (a moment that has not come) kept as None."""
    return None if moment is None else rfc3339(moment)
