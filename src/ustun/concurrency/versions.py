"""Resource versions and the strong entity-tags derived from them.

A versioned row has an integer `version`, bumped by every write, and optionally a
`generation`: random bits drawn when the resource is created. The ETag is `"<version>"` or
`"<version>.<generation>"`. The generation is what keeps a tag of a deleted resource from ever
matching a new resource created later at the same id (whose version starts again at 1).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row

if TYPE_CHECKING:
    from ustun.store.statements import FastRow

from ustun.http.etag import EntityTag

GENERATION_BYTES = 8
# The version column is a 32-bit integer on PostgreSQL; a larger number in a tag matches nothing.
MAX_VERSION = 2**31 - 1
_OPAQUE = re.compile(r"(?P<number>[1-9][0-9]{0,9})(?:\.(?P<generation>[0-9a-f]{16}))?")


def new_generation() -> str:
    """The generation of a newly created resource: 64 random bits as hex."""
    return secrets.token_hex(GENERATION_BYTES)


@dataclass(frozen=True, slots=True)
class Version:
    """One version of one resource; `etag` is its strong entity-tag."""

    number: int
    generation: str = ""

    @property
    def etag(self) -> EntityTag:
        """The strong ETag of this version (RFC 9110 §8.8.3): changes with every write."""
        suffix = f".{self.generation}" if self.generation else ""
        return EntityTag(f"{self.number}{suffix}")

    @classmethod
    def from_opaque(cls, opaque: str) -> Version | None:
        """The version an opaque-tag names, or None if it is not one of ours."""
        match = _OPAQUE.fullmatch(opaque)
        if match is None or int(match["number"]) > MAX_VERSION:
            return None
        return cls(int(match["number"]), match["generation"] or "")

    @classmethod
    def of(cls, row: Row[Any] | FastRow) -> Version:
        """The version of a row with a `version` and, optionally, a `generation` column."""
        return cls(row.version, row._mapping.get("generation") or "")
