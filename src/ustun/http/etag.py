"""Entity tags (RFC 9110 §8.8.3): the grammar, the two comparison functions, and tag lists.

In the style of h11's `_abnf.py`: every regex sits under the ABNF rule it encodes. Header values
arrive as `str` decoded as Latin-1 (as every ASGI server does), so `obs-text` is U+0080-U+00FF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# RFC 9110 §5.6.3
#   OWS = *( SP / HTAB )
OWS = r"[ \t]*"

# RFC 9110 §5.5
#   obs-text = %x80-FF
OBS_TEXT = r"\x80-\xff"

# RFC 9110 §8.8.3
#   etagc      = %x21 / %x23-7E / obs-text
#              ; VCHAR except double quotes, plus obs-text
ETAGC = rf"[\x21\x23-\x7e{OBS_TEXT}]"
#   opaque-tag = DQUOTE *etagc DQUOTE
OPAQUE_TAG = rf'"(?P<opaque>{ETAGC}*)"'
#   weak       = %s"W/"
WEAK = r"(?P<weak>W/)"
#   entity-tag = [ weak ] opaque-tag
ENTITY_TAG = rf"{WEAK}?{OPAQUE_TAG}"
_ENTITY_TAG = re.compile(ENTITY_TAG)

# RFC 9110 §13.1.1 and §13.1.2
#   If-Match      = "*" / #entity-tag
#   If-None-Match = "*" / #entity-tag
# RFC 9110 §5.6.1.2: a recipient accepts empty list elements:
#   #element => [ element ] *( OWS "," OWS [ element ] )
# Written so that no two `OWS` are ever adjacent (an absent element would let them split the
# same spaces many ways, and a failing match would backtrack exponentially):
#   list = OWS [ element OWS ] *( "," OWS [ element OWS ] )
# Commas may appear inside an opaque-tag, so a list is never split on "," before tokenising.
_TAG_NO_GROUPS = rf'(?:W/)?"{ETAGC}*"'
_ETAG_LIST = re.compile(rf"{OWS}(?:{_TAG_NO_GROUPS}{OWS})?(?:,{OWS}(?:{_TAG_NO_GROUPS}{OWS})?)*")
_STAR = re.compile(rf"{OWS}\*{OWS}")
# No limit in the RFC; a list longer than this is treated as malformed (it matches nothing),
# so one header cannot turn into a query with thousands of bound parameters.
MAX_LIST_TAGS = 100


@dataclass(frozen=True, slots=True)
class EntityTag:
    """One entity-tag: its opaque value (without quotes) and whether it is weak."""

    opaque: str
    weak: bool = False

    def __post_init__(self) -> None:
        if not re.fullmatch(f"{ETAGC}*", self.opaque):
            raise ValueError(f"not a valid opaque-tag value: {self.opaque!r}")

    @classmethod
    def parse(cls, value: str) -> EntityTag:
        """Parse one `entity-tag` (`"x"` or `W/"x"`); raise ValueError on anything else."""
        match = _ENTITY_TAG.fullmatch(value.strip(" \t"))
        if match is None:
            raise ValueError(f"not an entity-tag: {value!r}")
        return cls(match["opaque"], weak=match["weak"] is not None)

    def __str__(self) -> str:
        return f'{"W/" if self.weak else ""}"{self.opaque}"'

    def strong_match(self, other: EntityTag) -> bool:
        """§8.8.3.2 strong comparison: both strong and their opaque-tags identical."""
        return not self.weak and not other.weak and self.opaque == other.opaque

    def weak_match(self, other: EntityTag) -> bool:
        """§8.8.3.2 weak comparison: opaque-tags identical, weakness ignored."""
        return self.opaque == other.opaque


@dataclass(frozen=True, slots=True)
class EntityTagMatch:
    """A parsed `If-Match` / `If-None-Match` value: `*`, a list of tags, or malformed.

    A malformed value (or a list of more than `MAX_LIST_TAGS`) keeps `malformed=True` and no
    tags, so it matches nothing: a malformed `If-None-Match` never answers 304, and a malformed
    `If-Match` is refused as a bad request (`Preconditions`) instead of being ignored and
    letting the write through.
    """

    any: bool = False
    tags: tuple[EntityTag, ...] = ()
    malformed: bool = False

    @classmethod
    def parse(cls, value: str) -> EntityTagMatch:
        """Parse a field value (several field lines joined with ", ", as RFC 9110 §5.3 says)."""
        if _STAR.fullmatch(value):
            return cls(any=True)
        if not _ETAG_LIST.fullmatch(value):
            return cls(malformed=True)
        tags = tuple(
            EntityTag(m["opaque"], weak=m["weak"] is not None) for m in _ENTITY_TAG.finditer(value)
        )
        if len(tags) > MAX_LIST_TAGS:
            return cls(malformed=True)
        return cls(tags=tags)

    def strong_match(self, current: EntityTag) -> bool:
        """Does `current` match this condition under strong comparison (`If-Match`)?"""
        return self.any or any(tag.strong_match(current) for tag in self.tags)

    def weak_match(self, current: EntityTag) -> bool:
        """Does `current` match this condition under weak comparison (`If-None-Match`)?"""
        return self.any or any(tag.weak_match(current) for tag in self.tags)


def version_etag(version: int) -> str:
    """The strong entity-tag of a resource at `version`, quotes included: `"3"`."""
    return str(EntityTag(str(version)))
