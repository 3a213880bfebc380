"""AsyncAPI 3.0 for the webhooks ustun sends, at `/asyncapi.json` and `/asyncapi.yaml`.

One channel per event type, one `send` operation per channel, the message payload schemas
from the event catalogue like the OpenAPI `webhooks` section, the Standard Webhooks headers,
and the HMAC signature as the security scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ustun import __version__
from ustun.service.event_docs import SIGNATURE_HEADERS, component_name
from ustun.service.event_types import EventType

VERSION = "3.0.0"
SECURITY_SCHEME = "webhookSignature"


def _message(event: EventType) -> dict[str, Any]:
    return {
        "name": event.name,
        "title": event.name,
        "summary": event.description,
        "contentType": "application/json",
        "headers": {
            "type": "object",
            "required": list(SIGNATURE_HEADERS),
            "properties": {
                name: {**spec["schema"], "description": spec["description"]}
                for name, spec in SIGNATURE_HEADERS.items()
            },
        },
        "payload": {"$ref": f"#/components/schemas/{component_name(event.name)}"},
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
            "description": f"`{event.name}` events, POSTed to each subscribed endpoint's URL.",
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        operations[f"send{name}"] = {
            "action": "send",
            "title": f"Send {event.name}",
            "summary": event.description,
            "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{name}"}],
            "security": [{"$ref": f"#/components/securitySchemes/{SECURITY_SCHEME}"}],
        }
    return {
        "asyncapi": VERSION,
        "info": {
            "title": "ustun webhooks",
            "version": __version__,
            "description": (
                "Events ustun POSTs to your webhook endpoints (Standard Webhooks). Verify the "
                "signature over the raw body, deduplicate by `webhook-id`, answer 2xx fast. "
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
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": {component_name(e.name): e.message_schema() for e in events},
            "messages": messages,
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "httpApiKey",
                    "name": "webhook-signature",
                    "in": "header",
                    "description": (
                        "HMAC-SHA256 with the endpoint's secret (`whsec_` + base64; the key is "
                        'the decoded bytes) over `"{webhook-id}.{webhook-timestamp}.{raw body}"`, '
                        "sent as `v1,<base64>`; several space-separated during a rotation."
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
