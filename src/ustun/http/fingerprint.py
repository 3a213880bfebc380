"""The request fingerprint an idempotency key is bound to: method, target and body.

A JSON body is hashed in canonical form (keys sorted, no insignificant whitespace, UTF-8), so a
client that re-serialises the same document on retry still matches; any other body is hashed
byte for byte. The query string is taken as sent: reordering parameters is a different request.

The hash is keyed when a key is given: HMAC-SHA256, written `k1.` + unpadded base64url (46
characters). Unkeyed it is plain SHA-256 in hex (64 characters), which anyone who can read the
stored fingerprint can test guesses of a body against (a password inside it, say). `matches`
checks a stored fingerprint of either form, so records written before a key was set still
answer their retries until they expire.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable
from typing import Any

KEYED_PREFIX = "k1."


def canonical_json(body: bytes) -> bytes | None:
    """The canonical serialisation of a JSON document, or None if `body` is not JSON.

    Total over any bytes: a lone surrogate (`"\\ud800"`, valid JSON, not valid Unicode) is
    written as its UTF-8-style bytes, as `json.loads` reads them back.
    """
    try:
        document: Any = json.loads(body)
        text = json.dumps(
            document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True
        )
    except (ValueError, RecursionError):
        return None
    return text.encode("utf-8", "surrogatepass")


def _parts(method: str, path: str, query: bytes | str, body: bytes) -> list[bytes]:
    if isinstance(query, str):
        query = query.encode("latin-1")
    canonical = canonical_json(body) if body else None
    kind, content = (b"json", canonical) if canonical is not None else (b"raw", body)
    return [method.upper().encode(), path.encode(), query, kind, content]


def _digest(parts: list[bytes], key: bytes | None) -> str:
    digest = hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)
    # Length-prefixed fields: no two different requests can produce the same byte stream.
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    if key is None:
        return digest.hexdigest()
    return KEYED_PREFIX + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def fingerprint(
    method: str, path: str, query: bytes | str, body: bytes, *, key: bytes | None = None
) -> str:
    """The fingerprint of the method, `path?query`, and the (canonical JSON or raw) body:
    HMAC-SHA256 under `key` (`k1.…`), or hex SHA-256 without one."""
    return _digest(_parts(method, path, query, body), key)


def matches(
    stored: str,
    method: str,
    path: str,
    query: bytes | str,
    body: bytes,
    *,
    keys: Iterable[bytes],
) -> bool:
    """Whether `stored` is this request's fingerprint: a keyed one under one of `keys`, an
    unkeyed one as plain SHA-256."""
    candidates: Iterable[bytes | None] = keys if stored.startswith(KEYED_PREFIX) else [None]
    parts = _parts(method, path, query, body)
    return any(hmac.compare_digest(stored, _digest(parts, key)) for key in candidates)
