"""The body a receiver gets: `{"id", "type", "created_at", "api_version", "data"}`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ustun.clock import rfc3339

API_VERSION = "2026-12-01"
FULL, THIN = "full", "thin"


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
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
