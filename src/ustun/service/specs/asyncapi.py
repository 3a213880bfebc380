"""AsyncAPI 3.0 for the webhooks ustun sends, at `/asyncapi.json` and `/asyncapi.yaml`.

One channel per event type, one `send` operation per channel, the message payload schemas
from the event catalogue like the OpenAPI `webhooks` section (`event_docs.schemas`), the
Standard Webhooks headers, and the HMAC signature as the security scheme. Every schema is a
titled component, so generators (Modelina) name their models after it.

The same channels reach broker endpoints (`webhooks.brokers`): the `rabbitmq` and `nats`
servers, and each channel's, operation's and message's AMQP and NATS bindings, say how.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ustun import __version__
from ustun.service.specs.event_docs import (
    SIGNATURE_HEADERS,
    component_name,
    payload_name,
    ref,
    schemas,
)
from ustun.service.specs.event_types import titled_object
from ustun.webhooks.catalog import EventType

# The document is valid as 3.1.0 too (tests/service/test_asyncapi.py), and uses nothing 3.1
# adds; it stays 3.0.0 because Modelina (5.10, the latest) takes AsyncAPI only up to 3.0.0
# and reads a 3.1.0 document as plain JSON Schema (one model, `Root`).
VERSION = "3.0.0"
SECURITY_SCHEME = "webhookSignature"
HEADERS = "WebhookHeaders"
HEADERS_SCHEMA = titled_object(
    HEADERS,
    {
        name: {**spec["schema"], "description": spec["description"]}
        for name, spec in SIGNATURE_HEADERS.items()
    },
    required=list(SIGNATURE_HEADERS),
    description="The Standard Webhooks headers of every delivery.",
)


# https://github.com/asyncapi/bindings: amqp 0.3.0 and nats 0.1.0 (the latest of each).
AMQP_BINDING, NATS_BINDING = "0.3.0", "0.1.0"
BROKER_SERVERS = {
    "rabbitmq": {
        "host": "your-rabbitmq.example.com:5672",
        "protocol": "amqp",
        "protocolVersion": "0.9.1",
        "description": (
            "A `rabbitmq` endpoint's broker: each event is published, persistent and confirmed, "
            "to the endpoint's exchange with the event type as routing key and the event id as "
            "`message_id`; the Standard Webhooks headers are AMQP headers."
        ),
    },
    "nats": {
        "host": "your-nats.example.com:4222",
        "protocol": "nats",
        "description": (
            "A `nats` endpoint's broker: each event is published to the endpoint's JetStream "
            "subject and acknowledged by its stream; `Nats-Msg-Id` is the event id (the stream "
            "drops a second copy), beside the Standard Webhooks headers."
        ),
    },
}


def _channel_bindings() -> dict[str, Any]:
    return {
        "amqp": {
            "is": "routingKey",
            "exchange": {"type": "topic", "durable": True, "autoDelete": False, "vhost": "/"},
            "bindingVersion": AMQP_BINDING,
        }
    }


def _operation_bindings() -> dict[str, Any]:
    return {
        "amqp": {"deliveryMode": 2, "mandatory": False, "bindingVersion": AMQP_BINDING},
        "nats": {"bindingVersion": NATS_BINDING},
    }


def _message(event: EventType) -> dict[str, Any]:
    return {
        "name": event.name,
        "title": event.name,
        "summary": event.description,
        "contentType": "application/json",
        "headers": ref(HEADERS),
        "payload": ref(payload_name(event)),
        "bindings": {"amqp": {"messageType": event.name, "bindingVersion": AMQP_BINDING}},
    }


def document(events: Sequence[EventType], *, api_url: str = "") -> dict[str, Any]:
    """The AsyncAPI 3.0 document describing every event type in `events`."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for event in events:
        name = component_name(event.name)
        channel = name[0].lower() + name[1:]
        messages[name] = _message(event)
        channels[channel] = {
            "address": None,
            "title": event.name,
            "description": (
                f"`{event.name}` events, POSTed to each subscribed endpoint's URL, or published "
                f"to a `rabbitmq` endpoint's exchange with the routing key `{event.name}`, or to "
                "a `nats` endpoint's subject."
            ),
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
            "bindings": _channel_bindings(),
        }
        operations[f"send{name}"] = {
            "action": "send",
            "title": f"Send {event.name}",
            "summary": event.description,
            "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{name}"}],
            "security": [{"$ref": f"#/components/securitySchemes/{SECURITY_SCHEME}"}],
            "bindings": _operation_bindings(),
        }
    return {
        "asyncapi": VERSION,
        "info": {
            "title": "ustun webhooks",
            "version": __version__,
            "description": (
                "Events ustun POSTs to your webhook endpoints (Standard Webhooks), or publishes "
                "to your RabbitMQ exchange or NATS JetStream subject with the same body and "
                "headers. Verify the signature over the raw body, deduplicate by `webhook-id` "
                "(the message id), answer 2xx (acknowledge) fast. "
                f"Manage endpoints with the HTTP API{f' at {api_url}' if api_url else ''}."
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "receiver": {
                "host": "your-receiver.example.com",
                "protocol": "https",
                "description": "Your endpoint: the URL you registered with the webhook endpoint.",
                "security": [{"$ref": f"#/components/securitySchemes/{SECURITY_SCHEME}"}],
            },
            **{name: dict(server) for name, server in BROKER_SERVERS.items()},
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": {HEADERS: HEADERS_SCHEMA, **schemas(events)},
            "messages": messages,
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "httpApiKey",
                    "name": "webhook-signature",
                    "in": "header",
                    "description": (
                        'Over `"{webhook-id}.{webhook-timestamp}.{raw body}"`, by the '
                        "endpoint's `signature`: `hmac-sha256` (default) signs with HMAC-SHA256 "
                        "under its secret (`whsec_` + base64; the key is the decoded bytes), sent "
                        "as `v1,<base64>`; `ed25519` signs with a private key ustun keeps, sent "
                        "as `v1a,<base64>`, verified with the endpoint's `public_key` (`whpk_` + "
                        "base64 of the 32 raw bytes). Several space-separated during a rotation."
                    ),
                }
            },
        },
    }


router = APIRouter(include_in_schema=False)


def _document(request: Request) -> dict[str, Any]:
    events: Sequence[EventType] = request.app.state.event_types
    return document(events, api_url=str(request.base_url).rstrip("/"))


@router.get("/asyncapi.json")
async def asyncapi_json(request: Request) -> JSONResponse:
    """The AsyncAPI 3.0 document as JSON."""
    return JSONResponse(_document(request))


@router.get("/asyncapi.yaml")
async def asyncapi_yaml(request: Request) -> Response:
    """The AsyncAPI 3.0 document as YAML."""
    text = yaml.safe_dump(_document(request), sort_keys=False, allow_unicode=True)
    return Response(text, media_type="application/yaml")
