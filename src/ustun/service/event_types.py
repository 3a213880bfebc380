"""The catalogue of webhook event types: one place, with a JSON Schema of each `data`.

`GET /v1/event-types` serves it; OpenAPI `webhooks` and the AsyncAPI document are generated
from it, so a new event type is added here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ustun.webhooks.message import API_VERSION

_TIMESTAMP = {"type": "string", "format": "date-time"}

PAYMENT: dict[str, Any] = {
    "type": "object",
    "required": ["id", "amount", "currency", "status", "created_at", "updated_at"],
    "properties": {
        "id": {"type": "string", "pattern": "^pay_"},
        "object": {"const": "payment"},
        "amount": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "order_id": {"type": ["integer", "null"]},
        "description": {"type": ["string", "null"]},
        "status": {"enum": ["pending", "succeeded", "failed", "cancelled"]},
        "created_at": _TIMESTAMP,
        "updated_at": _TIMESTAMP,
    },
}

TRANSFER: dict[str, Any] = {
    "type": "object",
    "required": ["id", "from", "to", "amount", "currency", "created_at"],
    "properties": {
        "id": {"type": "string", "pattern": "^tr_"},
        "object": {"const": "transfer"},
        "from": {"type": "string"},
        "to": {"type": "string"},
        "amount": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "created_at": _TIMESTAMP,
    },
}

ENDPOINT_DISABLED: dict[str, Any] = {
    "type": "object",
    "required": ["id", "url", "reason"],
    "properties": {
        "id": {"type": "string", "pattern": "^we_"},
        "object": {"const": "webhook_endpoint"},
        "url": {"type": "string", "format": "uri"},
        "reason": {"type": "string"},
    },
}

JOB: dict[str, Any] = {
    "type": "object",
    "required": ["id", "kind", "status", "progress", "created_at", "result_url", "error"],
    "properties": {
        "id": {"type": "string", "pattern": "^job_"},
        "object": {"const": "job"},
        "kind": {"type": "string"},
        "status": {"enum": ["done", "failed"]},
        "progress": {"type": "integer", "minimum": 0, "maximum": 100},
        "created_at": _TIMESTAMP,
        "started_at": {**_TIMESTAMP, "type": ["string", "null"]},
        "completed_at": {**_TIMESTAMP, "type": ["string", "null"]},
        "result_url": {"type": ["string", "null"]},
        "error": {"type": ["object", "null"], "description": "An RFC 9457 problem object."},
        "cancel_requested": {"type": "boolean"},
    },
}

PING: dict[str, Any] = {
    "type": "object",
    "required": ["endpoint_id"],
    "properties": {"endpoint_id": {"type": "string", "pattern": "^we_"}},
}


@dataclass(frozen=True, slots=True)
class EventType:
    """One event type: its name, what it means, and the schema of its `data`."""

    name: str
    description: str
    schema: dict[str, Any]

    def message_schema(self) -> dict[str, Any]:
        """The JSON Schema of the whole webhook body for this type."""
        return {
            "type": "object",
            "required": ["id", "type", "created_at", "api_version", "data"],
            "properties": {
                "id": {"type": "string", "pattern": "^evt_"},
                "type": {"const": self.name},
                "created_at": _TIMESTAMP,
                "api_version": {"type": "string", "examples": [API_VERSION]},
                "data": self.schema,
            },
        }


CATALOGUE: tuple[EventType, ...] = (
    EventType("payment.created", "A payment was created (status `pending`).", PAYMENT),
    EventType("payment.succeeded", "A pending payment succeeded.", PAYMENT),
    EventType("payment.failed", "A pending payment failed.", PAYMENT),
    EventType("payment.cancelled", "A pending payment was cancelled.", PAYMENT),
    EventType("transfer.completed", "Money moved between two ledger accounts.", TRANSFER),
    EventType("job.completed", "An asynchronous job finished; `result_url` has its result.", JOB),
    EventType("job.failed", "An asynchronous job failed; `error` is a problem object.", JOB),
    EventType(
        "endpoint.disabled",
        "A webhook endpoint was disabled (410 Gone, 5 days of failures, or by request).",
        ENDPOINT_DISABLED,
    ),
    EventType("ping", "Sent by `POST /v1/webhook-endpoints/{id}/test`.", PING),
)

BY_NAME = {t.name: t for t in CATALOGUE}
