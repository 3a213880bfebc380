"""The request fingerprint an idempotency key is bound to: method, target and body.

A JSON body is hashed in canonical form (keys sorted, no insignificant whitespace, UTF-8), so a
client that re-serialises the same document on retry still matches; any other body is hashed
byte for byte. The query string is taken as sent: reordering parameters is a different request.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


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


def fingerprint(method: str, path: str, query: bytes | str, body: bytes) -> str:
    """Hex SHA-256 over the method, `path?query`, and the (canonical JSON or raw) body."""
    if isinstance(query, str):
        query = query.encode("latin-1")
    canonical = canonical_json(body) if body else None
    kind, content = (b"json", canonical) if canonical is not None else (b"raw", body)
    digest = hashlib.sha256()
    # Length-prefixed fields: no two different requests can produce the same byte stream.
    for part in (method.upper().encode(), path.encode(), query, kind, content):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()
