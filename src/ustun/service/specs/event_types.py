"""The catalogue of webhook event types: one place, with a JSON Schema of each `data`.

`ustun serve` registers these in its own `ustun.webhooks.catalog.Catalog` (`SERVICE_EVENTS`),
through the API a library user registers theirs with (so each name and schema is checked as
theirs are); `GET /v1/event-types` serves it, and OpenAPI `webhooks` and the AsyncAPI document
are generated from it (`ustun.service.specs.event_docs`), so a new event type is added here and
nowhere else.
Every schema carries a `title`, so that code generators name their models after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ustun.webhooks.catalog import Catalog, EventType

_TIMESTAMP = {"type": "string", "format": "date-time"}
_CURRENCY = {"type": "string", "pattern": "^[A-Z]{3}$"}
_AMOUNT = {"type": "integer", "minimum": 1}


def camel(name: str) -> str:
    """`payment.succeeded` → `PaymentSucceeded`, `created_at` → `CreatedAt`."""
    return "".join(part.capitalize() for part in name.replace("_", ".").split("."))


def titled_object(
    title: str,
    properties: Mapping[str, Mapping[str, Any]],
    *,
    required: Sequence[str],
    description: str = "",
    closed: bool = False,
) -> dict[str, Any]:
    """An object schema titled `title` whose untitled properties get `<title><Property>` titles
    (a `…Data` title drops its suffix: `PaymentData.status` is `PaymentStatus`)."""
    prefix = title.removesuffix("Data")
    schema: dict[str, Any] = {"title": title, "type": "object"}
    if description:
        schema["description"] = description
    schema["required"] = list(required)
    schema["properties"] = {
        name: spec if "title" in spec or "$ref" in spec else {"title": prefix + camel(name), **spec}
        for name, spec in properties.items()
    }
    if closed:
        schema["additionalProperties"] = False
    return schema


PAYMENT = titled_object(
    "PaymentData",
    {
        "id": {"type": "string", "pattern": "^pay_"},
        "object": {"const": "payment"},
        "amount": _AMOUNT,
        "currency": _CURRENCY,
        "order_id": {"type": ["integer", "null"]},
        "description": {"type": ["string", "null"]},
        "status": {"enum": ["pending", "succeeded", "failed", "cancelled"]},
        "created_at": _TIMESTAMP,
        "updated_at": _TIMESTAMP,
    },
    required=["id", "amount", "currency", "status", "created_at", "updated_at"],
    description="The payment, as `GET /v1/payments/{id}` returns it.",
)

TRANSFER = titled_object(
    "TransferData",
    {
        "id": {"type": "string", "pattern": "^tr_"},
        "object": {"const": "transfer"},
        "from": {"type": "string"},
        "to": {"type": "string"},
        "amount": _AMOUNT,
        "currency": _CURRENCY,
        "created_at": _TIMESTAMP,
    },
    required=["id", "from", "to", "amount", "currency", "created_at"],
    description="The transfer, as `GET /v1/transfers/{id}` returns it.",
)


def _endpoint_change(title: str, description: str) -> dict[str, Any]:
    """The `data` of an operational event about one endpoint: which one, and why."""
    return titled_object(
        title,
        {
            "id": {"type": "string", "pattern": "^we_"},
            "object": {"const": "webhook_endpoint"},
            "url": {"type": "string", "format": "uri"},
            "reason": {"type": "string"},
        },
        required=["id", "url", "reason"],
        description=description,
    )


ENDPOINT_DISABLED = _endpoint_change(
    "EndpointDisabledData", "The endpoint that was disabled (its registered URL) and why."
)
ENDPOINT_ENABLED = _endpoint_change(
    "EndpointEnabledData", "The endpoint that was enabled again and why."
)
ENDPOINT_RECOVERED = _endpoint_change(
    "EndpointRecoveredData", "The endpoint that was failing and has just accepted a delivery."
)

ATTEMPT_EXHAUSTED = titled_object(
    "AttemptExhaustedData",
    {
        "object": {"const": "delivery"},
        "delivery_id": {"type": "string", "pattern": "^dlv_"},
        "endpoint_id": {"type": "string", "pattern": "^we_"},
        "url": {"type": "string", "format": "uri", "description": "The endpoint's URL."},
        "event_id": {"type": "string", "pattern": "^evt_"},
        "event_type": {"type": "string"},
        "attempts": {"type": "integer", "minimum": 0},
        "last_status": {
            "type": ["integer", "null"],
            "description": "The HTTP status of the last attempt; null when none came back.",
        },
        "last_error": {
            "type": ["string", "null"],
            "description": "Why the last attempt failed when there was no status, or the reason "
            "it was given up without one.",
        },
    },
    required=["delivery_id", "endpoint_id", "url", "event_id", "event_type", "attempts"],
    description="A delivery that will not be retried: dead-lettered (`dead`).",
)

# RFC 9457 §3.1; a member of `JobData`, so its title names it apart from the API's `Problem`.
JOB_PROBLEM = titled_object(
    "JobProblem",
    {
        "type": {"type": "string", "description": "`<server>/problems/<slug>`: its page."},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
    },
    required=["type", "title", "status"],
    description="Why the job failed: RFC 9457 problem details, as `GET /v1/jobs/{id}` shows.",
)

JOB = titled_object(
    "JobData",
    {
        "id": {"type": "string", "pattern": "^job_"},
        "object": {"const": "job"},
        "kind": {"type": "string"},
        "status": {"enum": ["done", "failed"]},
        "progress": {"type": "integer", "minimum": 0, "maximum": 100},
        "created_at": _TIMESTAMP,
        "started_at": {**_TIMESTAMP, "type": ["string", "null"]},
        "completed_at": {**_TIMESTAMP, "type": ["string", "null"]},
        "result_url": {"type": ["string", "null"]},
        "error": {
            "anyOf": [JOB_PROBLEM, {"title": "NoJobError", "type": "null"}],
            "description": "A problem object when the job failed, else null.",
        },
        "cancel_requested": {"type": "boolean"},
    },
    required=["id", "kind", "status", "progress", "created_at", "result_url", "error"],
    description="The job in its final state, as `GET /v1/jobs/{id}` returns it.",
)

PING = titled_object(
    "PingData",
    {"endpoint_id": {"type": "string", "pattern": "^we_"}},
    required=["endpoint_id"],
    description="The endpoint the test was sent to.",
)


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
        thin=False,
        example={
            "id": "we_01JEXAMPLE0000000000000000",
            "object": "webhook_endpoint",
            "url": "https://example.com/hooks",
            "reason": "the endpoint answered 410 Gone",
        },
    ),
    EventType(
        "endpoint.enabled",
        "A disabled webhook endpoint was enabled again (by request).",
        ENDPOINT_ENABLED,
        thin=False,
        example={
            "id": "we_01JEXAMPLE0000000000000000",
            "object": "webhook_endpoint",
            "url": "https://example.com/hooks",
            "reason": "enabled by request",
        },
    ),
    EventType(
        "endpoint.recovered",
        "A failing webhook endpoint accepted a delivery again; its failing streak is over.",
        ENDPOINT_RECOVERED,
        thin=False,
        example={
            "id": "we_01JEXAMPLE0000000000000000",
            "object": "webhook_endpoint",
            "url": "https://example.com/hooks",
            "reason": "a delivery succeeded after failures",
        },
    ),
    EventType(
        "message.attempt.exhausted",
        "A delivery was dead-lettered: its retries ran out, or the endpoint refused it for good.",
        ATTEMPT_EXHAUSTED,
        thin=False,
        example={
            "object": "delivery",
            "delivery_id": "dlv_01JEXAMPLE0000000000000000",
            "endpoint_id": "we_01JEXAMPLE0000000000000000",
            "url": "https://example.com/hooks",
            "event_id": "evt_01JEXAMPLE0000000000000000",
            "event_type": "payment.created",
            "attempts": 10,
            "last_status": 500,
            "last_error": None,
        },
    ),
    EventType("ping", "Sent by `POST /v1/webhook-endpoints/{id}/test`.", PING, thin=False),
)


def registered(events: Iterable[EventType]) -> Catalog:
    """A catalogue of `events`, each registered as a library user registers theirs."""
    catalog = Catalog()
    for event in events:
        catalog.register(
            event.name,
            schema=event.schema,
            description=event.description,
            example=event.example,
            deprecated=event.deprecated,
            thin=event.thin,
        )
    return catalog


SERVICE_EVENTS = registered(CATALOGUE)
"""`ustun serve`'s own event catalogue."""

BY_NAME = {t.name: t for t in CATALOGUE}
