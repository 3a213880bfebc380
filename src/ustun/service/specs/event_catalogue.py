"""`GET /v1/event-types`: the service's event catalogue (`event_types.SERVICE_EVENTS`), served."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ustun.service.plumbing.portal_access import visible
from ustun.service.specs.event_types import SERVICE_EVENTS
from ustun.webhooks.catalog import EventType

router = APIRouter(tags=["webhooks"])


def described(event: EventType) -> dict[str, Any]:
    """One event type as the API lists it: the current schema as `schema` (as before versions),
    every version's, the example and whether it is deprecated."""
    return {
        "name": event.name,
        "description": event.description,
        "schema": event.schema,
        "version": event.version,
        "versions": [{"version": n, "schema": s} for n, s in enumerate(event.versions, 1)],
        "example": event.example,
        "deprecated": event.deprecated,
    }


@router.get("/v1/event-types")
async def list_event_types(request: Request) -> dict[str, Any]:
    """The catalogue: every event type with the JSON Schema of its `data`, per version (a
    portal link restricted to some types: those)."""
    return {
        "data": [described(t) for t in visible(request, SERVICE_EVENTS)],
        "next_cursor": None,
    }
