"""The body a receiver gets: `{"id", "type", "created_at", "api_version", "data"}`."""

from __future__ import annotations

import json
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any

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


def body(
    event_id: str,
    event_type: str,
    created_at: datetime,
    data: dict[str, Any],
    *,
    payload: str = FULL,
    object_url: str | None = None,
) -> bytes:
    """Serialise an event; a `thin` payload carries only the object's `id` and `url`."""
    if payload == THIN:
        data = {"id": data.get("id"), "url": object_url}
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
) -> bytes:
    """`body` from the `stored_data` text, without decoding it when that gives the same bytes.

    Stored text without `\\u` escapes is exactly what `body` would write for `data`, so a full
    payload splices it in (the dispatcher builds a body per delivery).
    """
    if payload == THIN or "\\u" in data:
        return body(
            event_id,
            event_type,
            created_at,
            json.loads(data),
            payload=payload,
            object_url=object_url,
        )
    return (
        f'{{"id":{_string(event_id)},"type":{_string(event_type)},'
        f'"created_at":"{rfc3339(created_at)}","api_version":"{API_VERSION}","data":{data}}}'
    ).encode()
