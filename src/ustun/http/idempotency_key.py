"""The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header).

The draft makes the value an RFC 8941 sf-string; real clients also send bare values (a UUID
unquoted), so both are accepted. Either way the key itself is 1 to 255 visible ASCII characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ustun.errors import InvalidIdempotencyKey

HEADER = "idempotency-key"
MAX_LENGTH = 255

# RFC 8941 §3.3.3:
#   sf-string = DQUOTE *chr DQUOTE
#   chr       = unescaped / escaped
#   unescaped = %x20-21 / %x23-5B / %x5D-7E
#   escaped   = "\" ( DQUOTE / "\" )
# Deliberately narrower: the contract says "visible ASCII", so the space (%x20) is refused too.
_SF_STRING = re.compile(r'"((?:[\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
# A bare key: VCHAR (RFC 5234: %x21-7E) except DQUOTE, and except "," because an intermediary
# joins repeated header lines with commas (RFC 9110 §5.3), which would make two keys look like one.
_BARE = re.compile(r"[\x21\x23-\x2b\x2d-\x7e]+")
_ESCAPE = re.compile(r"\\([\"\\])")
# RFC 9110 §5.5: a field value has no leading or trailing whitespace (OWS = SP / HTAB).
_OWS = " \t"
_VCHARS = re.compile(r"[\x21-\x7e]*")  # RFC 5234 VCHAR


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """A validated key: 1 to 255 visible ASCII characters."""

    value: str

    def __post_init__(self) -> None:
        if not 1 <= len(self.value) <= MAX_LENGTH or not _is_vchar(self.value):
            raise ValueError("an idempotency key is 1 to 255 visible ASCII characters")


def _is_vchar(value: str) -> bool:
    return _VCHARS.fullmatch(value) is not None


def parse_idempotency_key(values: Sequence[str]) -> IdempotencyKey | None:
    """Every instance of the header in the request → the key, None when absent, or raise."""
    if not values:
        return None
    if len(values) > 1:
        raise InvalidIdempotencyKey("Send the Idempotency-Key header once, not several times.")
    raw = values[0].strip(_OWS)
    if len(raw) > MAX_LENGTH + 2 + MAX_LENGTH:  # quotes plus an escape per character, at most
        raise InvalidIdempotencyKey(f"An Idempotency-Key is at most {MAX_LENGTH} characters.")
    if raw.startswith('"'):
        match = _SF_STRING.fullmatch(raw)
        if match is None:
            raise InvalidIdempotencyKey(
                'A quoted Idempotency-Key must be one RFC 8941 string: "..." with only visible '
                'ASCII inside and \\" or \\\\ as the only escapes.'
            )
        value = _ESCAPE.sub(r"\1", match.group(1))
    elif _BARE.fullmatch(raw):
        value = raw
    else:
        raise InvalidIdempotencyKey(
            "An Idempotency-Key is 1 to 255 visible ASCII characters (no spaces or commas "
            'unquoted), or an RFC 8941 string "...".'
        )
    if not 1 <= len(value) <= MAX_LENGTH:
        raise InvalidIdempotencyKey(
            f"An Idempotency-Key is 1 to {MAX_LENGTH} characters; this one has {len(value)}."
        )
    return IdempotencyKey(value)
