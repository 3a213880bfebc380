"""The event catalogue as documentation: one JSON schema per event type, for both documents.

`/openapi.json` (its `webhooks` section) and `/asyncapi.json` are both built from
`EventDoc`s, so a receiver reads the same payload schema whichever document it starts from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EventDoc:
    """One event type: its name, what it means, and the JSON schema of its `data`."""

    type: str
    description: str
    data_schema: Mapping[str, Any]

    @property
    def name(self) -> str:
        """An identifier-safe name (`payment.succeeded` → `PaymentSucceeded`)."""
        return "".join(part.capitalize() for part in self.type.replace("_", ".").split("."))


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


# What an endpoint configured with `"payload": "thin"` receives as `data`.
THIN_DATA: Mapping[str, Any] = {
    "title": "ThinData",
    "description": "Only the object's id and URL: fetch the object to see its current state.",
    "type": "object",
    "required": ["id", "url"],
    "properties": {"id": {"type": "string"}, "url": {"type": "string"}},
}


def envelope_schema(doc: EventDoc) -> dict[str, Any]:
    """The JSON schema of the whole webhook body of `doc`'s event type (Standard Webhooks)."""
    return {
        "title": doc.name,
        "description": doc.description,
        "type": "object",
        "required": ["id", "type", "created_at", "api_version", "data"],
        "properties": {
            "id": {"type": "string", "description": "Event id (`evt_…`).", "pattern": "^evt_"},
            "type": {"type": "string", "const": doc.type},
            "created_at": {"type": "string", "format": "date-time"},
            "api_version": {"type": "string"},
            "data": {"anyOf": [dict(doc.data_schema), dict(THIN_DATA)]},
        },
    }
