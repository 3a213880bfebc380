"""Entity tags (RFC 9110 §8.8.3)."""

from __future__ import annotations


def version_etag(version: int) -> str:
    """The strong entity-tag of a resource at `version`, quotes included: `"3"`."""
    return f'"{version}"'
