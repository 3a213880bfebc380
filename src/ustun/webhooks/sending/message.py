"""The body a receiver gets: `{"id", "type", "created_at", "api_version", "data"}`.

`data` is the object the event is about (`full`), or for a `thin` endpoint only its `id` and
absolute `url`, to fetch it with the API. An event about no object (`ping`,
`endpoint.disabled`) has no URL and is always sent full.
"""

from __future__ import annotations

import json
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any
from urllib.parse import urlsplit

from ustun.clock import rfc3339

API_VERSION = "2026-12-01"
FULL, THIN = "full", "thin"

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_encode_stored = json.JSONEncoder(separators=(",", ":")).encode
# How `_encode` writes a string (C-accelerated), for the fields `stored_body` writes itself.
_string = encode_basestring


def stored_data(data: dict[str, Any]) -> str:
    """An event's `data` as the outbox stores it: compact JSON, non-ASCII escaped."""
    return _encode_stored(data)


def absolute(base_url: str, url: str) -> str:
    """`url` (a path on the API, like `/v1/payments/pay_1`) under `base_url`; absolute as is."""
    if urlsplit(url).scheme:
        return url
    return f"{base_url.rstrip('/')}/{url.lstrip('/')}"


def body(
    event_id: str,
    event_type: str,
    created_at: datetime,
    data: dict[str, Any],
    *,
    payload: str = FULL,
    object_url: str | None = None,
    base_url: str = "",
) -> bytes:
    """Serialise an event; a `thin` payload carries only the object's `id` and absolute `url`
    (`object_url` under `base_url`, the service's public URL)."""
    if payload == THIN and object_url is not None:
        data = {"id": data.get("id"), "url": absolute(base_url, object_url)}
    message = {
        "id": event_id,
        "type": event_type,
        "created_at": rfc3339(created_at),
        "api_version": API_VERSION,
        "data": data,
    }
    return _encode(message).encode()


def stored_body(
    event_id: str,
    event_type: str,
    created_at: datetime,
    data: str,
    *,
    payload: str = FULL,
    object_url: str | None = None,
    base_url: str = "",
) -> bytes:
    """`body` from the `stored_data` text, without decoding it when that gives the same bytes.

    Stored text without `\\u` escapes is exactly what `body` would write for `data`, so a full
    payload splices it in (the dispatcher builds a body per delivery).
    """
    if (payload == THIN and object_url is not None) or "\\u" in data:
        return body(
            event_id,
            event_type,
            created_at,
            json.loads(data),
            payload=payload,
            object_url=object_url,
            base_url=base_url,
        )
    return (
        f'{{"id":{_string(event_id)},"type":{_string(event_type)},'
        f'"created_at":"{rfc3339(created_at)}","api_version":"{API_VERSION}","data":{data}}}'
    ).encode()
