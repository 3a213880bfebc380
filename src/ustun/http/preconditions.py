"""Conditional requests (RFC 9110 §13): parse the four precondition fields, evaluate them in order.

`evaluate` is the §13.2.2 algorithm as a pure function of the request's method and
preconditions and the selected representation's current validators; it returns one of three
small values: `Proceed`, `NotModified` (304) or `PreconditionFailed` (412). Range requests are
not served, so If-Range (step 5) never applies. The caller applies §13.2.1 first: when the
response without preconditions would not be 2xx or 412 (e.g. 404 on a GET of nothing), it
ignores them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from ustun.errors import InvalidPrecondition
from ustun.http.dates import parse_http_date
from ustun.http.etag import MAX_LIST_TAGS, EntityTag, EntityTagMatch

IF_MATCH: Final = "if-match"
IF_NONE_MATCH: Final = "if-none-match"
IF_MODIFIED_SINCE: Final = "if-modified-since"
IF_UNMODIFIED_SINCE: Final = "if-unmodified-since"
_FIELDS = (IF_MATCH, IF_NONE_MATCH, IF_MODIFIED_SINCE, IF_UNMODIFIED_SINCE)
_SAFE_READS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Preconditions:
    """The precondition fields of one request, parsed; None where a field is absent.

    A date field that is not one valid HTTP-date is dropped here, since §13.1.3 and §13.1.4
    say a recipient MUST ignore it. An If-Match that is not `*` or a list of entity-tags
    (§13.1.1) raises `InvalidPrecondition` (400): nothing could ever match it, and a 412 would
    send the client to re-read and retry with the same header. A malformed If-None-Match
    matches nothing, which only ever makes the answer a full one.
    """

    if_match: EntityTagMatch | None = None
    if_none_match: EntityTagMatch | None = None
    if_modified_since: datetime | None = None
    if_unmodified_since: datetime | None = None

    def __post_init__(self) -> None:
        if self.if_match is not None and self.if_match.malformed:
            raise InvalidPrecondition(
                f"If-Match must be `*` or a comma-separated list of at most {MAX_LIST_TAGS} "
                'entity-tags in double quotes, such as `"3"`: send the ETag exactly as the '
                "server sent it."
            )

    @classmethod
    def from_headers(cls, headers: Iterable[tuple[str, str]]) -> Preconditions:
        """Read them from `(name, value)` pairs; repeated field lines are joined (§5.3)."""
        found: dict[str, list[str]] = {}
        for name, value in headers:
            key = name.lower()
            if key in _FIELDS:
                found.setdefault(key, []).append(value)

        def joined(name: str) -> str | None:
            values = found.get(name)
            return None if values is None else ", ".join(values)

        def tags(name: str) -> EntityTagMatch | None:
            value = joined(name)
            return None if value is None else EntityTagMatch.parse(value)

        def date(name: str) -> datetime | None:
            value = joined(name)
            return None if value is None else parse_http_date(value)

        return cls(
            if_match=tags(IF_MATCH),
            if_none_match=tags(IF_NONE_MATCH),
            if_modified_since=date(IF_MODIFIED_SINCE),
            if_unmodified_since=date(IF_UNMODIFIED_SINCE),
        )


@dataclass(frozen=True, slots=True)
class Validators:
    """The current validators of the selected representation (§8.8): its ETag and Last-Modified."""

    etag: EntityTag
    last_modified: datetime | None = None


@dataclass(frozen=True, slots=True)
class Proceed:
    """Every precondition holds (or none applies): perform the method."""

    status: None = None


@dataclass(frozen=True, slots=True)
class NotModified:
    """304: a GET/HEAD whose If-None-Match or If-Modified-Since evaluated false."""

    field: str
    status: int = 304


@dataclass(frozen=True, slots=True)
class PreconditionFailed:
    """412: `field` evaluated false."""

    field: str
    status: int = 412


Outcome = Proceed | NotModified | PreconditionFailed


def _unchanged_since(since: datetime | None, modified: datetime | None) -> bool:
    """Last-Modified <= `since`; an absent field or an absent modification date counts as true."""
    # An HTTP-date has one-second resolution, so Last-Modified is compared as it was sent.
    return since is None or modified is None or modified.replace(microsecond=0) <= since


def evaluate(method: str, pre: Preconditions, current: Validators | None) -> Outcome:
    """RFC 9110 §13.2.2 on `current` (None: the target resource has no representation)."""
    modified = None if current is None else current.last_modified
    # Step 1, §13.1.1: "*" is true iff a current representation exists; else strong comparison.
    if pre.if_match is not None:
        if current is None or not pre.if_match.strong_match(current.etag):
            return PreconditionFailed(IF_MATCH)
    # Step 2, §13.1.4: only without If-Match; ignored when there is no modification date.
    elif not _unchanged_since(pre.if_unmodified_since, modified):
        return PreconditionFailed(IF_UNMODIFIED_SINCE)
    safe_read = method.upper() in _SAFE_READS
    # Step 3, §13.1.2: "*" is false iff a current representation exists; else weak comparison.
    if pre.if_none_match is not None:
        if current is not None and pre.if_none_match.weak_match(current.etag):
            return NotModified(IF_NONE_MATCH) if safe_read else PreconditionFailed(IF_NONE_MATCH)
    # Step 4, §13.1.3: GET/HEAD only, only without If-None-Match, ignored without a modification
    # date; false (not modified since) means 304.
    elif (
        safe_read
        and None not in (modified, pre.if_modified_since)
        and _unchanged_since(pre.if_modified_since, modified)
    ):
        return NotModified(IF_MODIFIED_SINCE)
    return Proceed()
