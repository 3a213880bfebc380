"""What both event documents share: the Standard Webhooks headers and component names.

`/openapi.json` (its `webhooks` section) and `/asyncapi.json` are both generated from the one
event catalogue (`ustun.service.event_types.CATALOGUE`) and its `message_schema()`, so a
receiver reads the same payload schema whichever document it starts from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Standard Webhooks headers, with the shape each takes on the wire.
SIGNATURE_HEADERS: Mapping[str, Mapping[str, Any]] = {
    "webhook-id": {
        "description": "The event id (`evt_…`); the same on every retry. Deduplicate by it.",
        "schema": {"type": "string", "pattern": "^evt_"},
    },
    "webhook-timestamp": {
        "description": "Unix seconds when this attempt was signed; reject it if too old.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "webhook-signature": {
        "description": (
            'Space-separated `v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>`; '
            "two during a secret rotation. Any one matching proves the sender."
        ),
        "schema": {"type": "string", "pattern": "^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$"},
    },
}


def component_name(event_type: str) -> str:
    """An identifier-safe name for an event type (`payment.succeeded` → `PaymentSucceeded`)."""
    return "".join(part.capitalize() for part in event_type.replace("_", ".").split("."))
