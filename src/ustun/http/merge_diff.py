"""The JSON merge patch that turns one document into another (RFC 7396, the inverse of §2)."""

from __future__ import annotations

from typing import Any

MEDIA_TYPE = "application/merge-patch+json"


def merge_diff(old: Any, new: Any) -> Any:
    """A patch `p` with `apply(old, p) == new`: changed members, and null for removed ones.

    RFC 7396 cannot set a member to null (null means "remove"), nor patch inside an array:
    a changed array is sent whole.
    """
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_diff(old[key], value)
    return patch
