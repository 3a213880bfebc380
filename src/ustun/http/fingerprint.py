"""The request fingerprint an idempotency key is bound to: method, target and body.

A JSON body is hashed in canonical form (keys sorted, no insignificant whitespace, UTF-8), so a
client that re-serialises the same document on retry still matches; any other body is hashed
byte for byte. The query string is taken as sent: reordering parameters is a different request.

The hash is keyed when a key is given: HMAC-SHA256, written `k1.<key id>.<hmac>` in unpadded
base64url (55 characters), the key id saying which key made it. Unkeyed it is plain SHA-256 in
hex (64 characters), which anyone who can read the stored fingerprint can test guesses of a
body against (a password inside it, say). `matches` checks a stored fingerprint of either form,
so records written before a key was set still answer their retries until they expire.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
from collections.abc import Iterable
from typing import Any

KEYED_PREFIX = "k1."
_KEY_ID = b"ustun fingerprint key id"


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


def _base64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@functools.lru_cache(maxsize=4)
def key_id(key: bytes) -> str:
    """The 8 characters that name `key` in its fingerprints (telling nothing of the key).
    Remembered: a process has one key, two while rotating, and every fingerprint names it."""
    return _base64(hmac.digest(key, _KEY_ID, "sha256")[:6])


def _digest(parts: list[bytes], key: bytes | None) -> str:
    digest = hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)
    # Length-prefixed fields: no two different requests can produce the same byte stream.
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    if key is None:
        return digest.hexdigest()
    return f"{KEYED_PREFIX}{key_id(key)}.{_base64(digest.digest())}"


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
) -> bool | None:
    """Whether `stored` is this request's fingerprint: an unkeyed one as plain SHA-256, a keyed
    one under whichever of `keys` made it; None when none of them did (it cannot be told)."""
    key = None
    if stored.startswith(KEYED_PREFIX):
        made_by = stored.removeprefix(KEYED_PREFIX).partition(".")[0]
        key = next((k for k in keys if key_id(k) == made_by), None)
        if key is None:
            return None
    return hmac.compare_digest(stored, _digest(_parts(method, path, query, body), key))
