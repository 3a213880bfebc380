"""What both event documents share: the named payload schemas and the Standard Webhooks headers.

`/openapi.json` (its `webhooks` section) and `/asyncapi.json` are both generated from the one
event catalogue (`ustun.service.specs.event_types.CATALOGUE`) through `schemas()`, so a receiver
reads the same payload schema whichever document it starts from. Every schema is a named
component with a `title` (`PaymentCreatedEvent`, `PaymentData`, `ThinEventData`, …), so
generated models get real names.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ustun.service.specs.event_types import camel, titled_object
from ustun.webhooks.catalog import EventType
from ustun.webhooks.sending.message import API_VERSION

# Standard Webhooks headers, with the shape each takes on the wire.
SIGNATURE_HEADERS: Mapping[str, Mapping[str, Any]] = {
    "webhook-id": {
        "description": "The event id (`evt_…`); the same on every retry. Deduplicate by it.",
        "schema": {"title": "WebhookId", "type": "string", "pattern": "^evt_"},
    },
    "webhook-timestamp": {
        "description": "Unix seconds when this attempt was signed; reject it if too old.",
        "schema": {"title": "WebhookTimestamp", "type": "string", "pattern": "^[0-9]+$"},
    },
    "webhook-signature": {
        "description": (
            'Space-separated `v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>`, or '
            "`v1a,<base64 ed25519 signature>` for an `ed25519` endpoint (verify with its "
            "`whpk_` public key); two during a rotation. Any one matching proves the sender."
        ),
        "schema": {
            "title": "WebhookSignature",
            "type": "string",
            "pattern": "^v1a?,[A-Za-z0-9+/=]+( v1a?,[A-Za-z0-9+/=]+)*$",
        },
    },
}

THIN_DATA = "ThinEventData"
THIN_DATA_SCHEMA = titled_object(
    THIN_DATA,
    {
        "id": {"type": "string", "description": "The object's id (`pay_…`, `tr_…`, `job_…`)."},
        "url": {
            "type": "string",
            "format": "uri",
            "pattern": "^https?://",
            "description": "Where the API serves the object now (absolute): GET it with your key.",
        },
    },
    required=["id", "url"],
    description=(
        "What a `thin` endpoint gets instead of the object: its id and absolute URL, exactly "
        "these two members."
    ),
    closed=True,
)


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema `name`."""
    return {"$ref": f"#/components/schemas/{name}"}


def component_name(event_type: str) -> str:
    """An identifier-safe name for an event type (`payment.succeeded` → `PaymentSucceeded`)."""
    return camel(event_type)


def payload_name(event: EventType) -> str:
    """The component schema of the whole body of `event` (`PaymentSucceededEvent`)."""
    return f"{component_name(event.name)}Event"


def _data_name(event: EventType) -> str:
    """The schema of `data`: the full object's, or for a thin-able event the union of that
    and `ThinEventData` (`PaymentData` → `PaymentEventData`)."""
    full: str = event.schema["title"]
    return f"{full.removesuffix('Data')}EventData" if event.thin else full


def _hoisted(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` and the titled objects among its properties (or their `anyOf` variants), each
    made a component of its title and referenced: a generator names a component's model, where
    it numbers an inline object's (the catalogue keeps them inline: `GET /v1/event-types`
    serves each schema alone)."""
    found: dict[str, Any] = {}

    def lift(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        if spec.get("type") == "object" and "title" in spec:
            found[spec["title"]] = spec
            return ref(spec["title"])
        if "anyOf" in spec:
            return {**spec, "anyOf": [lift(variant) for variant in spec["anyOf"]]}
        return spec

    properties = {name: lift(spec) for name, spec in schema.get("properties", {}).items()}
    return {schema["title"]: {**schema, "properties": properties}, **found}


def _data_schemas(event: EventType) -> dict[str, Any]:
    full: str = event.schema["title"]
    out = _hoisted(event.schema)
    if event.thin:
        out[_data_name(event)] = {
            "title": _data_name(event),
            "description": (
                f"`{full}` to a `full` endpoint, `{THIN_DATA}` to a `thin` one; tell them apart "
                "by the members (thin has exactly `id` and `url`)."
            ),
            "oneOf": [ref(full), ref(THIN_DATA)],
        }
    return out


def _payload_schema(event: EventType) -> dict[str, Any]:
    return titled_object(
        payload_name(event),
        {
            "id": {"title": "EventId", "type": "string", "pattern": "^evt_"},
            "type": {"const": event.name},
            "created_at": {"title": "EventCreatedAt", "type": "string", "format": "date-time"},
            "api_version": {"title": "ApiVersion", "type": "string", "examples": [API_VERSION]},
            "data": ref(_data_name(event)),
        },
        required=["id", "type", "created_at", "api_version", "data"],
        description=event.description,
    )


def schemas(events: Sequence[EventType]) -> dict[str, Any]:
    """Every component schema the event documents need: bodies, data, and `ThinEventData`."""
    out: dict[str, Any] = {}
    if any(e.thin for e in events):
        out[THIN_DATA] = THIN_DATA_SCHEMA
    for event in events:
        out.update(_data_schemas(event))
        out[payload_name(event)] = _payload_schema(event)
    return copy.deepcopy(out)  # a document may be changed; the catalogue's schemas stay as they are


def _webhook(event: EventType) -> dict[str, Any]:
    name = component_name(event.name)
    return {
        "post": {
            "summary": event.name,
            "description": event.description,
            "operationId": f"webhook_{name}",
            "tags": ["webhooks"],
            **({"deprecated": True} if event.deprecated else {}),
            "parameters": [
                {"name": header, "in": "header", "required": True, **spec}
                for header, spec in SIGNATURE_HEADERS.items()
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(payload_name(event))}},
            },
            "responses": {
                "200": {"description": "Any 2xx within the timeout acknowledges the event."},
                "410": {"description": "Gone: the endpoint is disabled at once."},
                "default": {
                    "description": (
                        "Any other answer, or none within the timeout, is retried on the "
                        "schedule; with `Webhook-Delivery: abort-message` this delivery is "
                        "dead-lettered at once instead (the endpoint stays enabled)."
                    ),
                    "headers": {
                        "Webhook-Delivery": {
                            "description": "`abort-message`: do not retry this delivery.",
                            "schema": {"type": "string", "enum": ["abort-message"]},
                        }
                    },
                },
            },
        }
    }


def openapi_webhooks(events: Sequence[EventType]) -> dict[str, Any]:
    """The OpenAPI 3.1 `webhooks` section: one POST per event type; its schemas are
    `schemas(events)`."""
    return {e.name: _webhook(e) for e in events}
