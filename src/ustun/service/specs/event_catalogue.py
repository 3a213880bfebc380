"""`GET /v1/event-types`: the catalogue of event types (`event_types.CATALOGUE`), served."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ustun.service.specs.event_types import CATALOGUE

router = APIRouter(tags=["webhooks"])


@router.get("/v1/event-types")
async def list_event_types() -> dict[str, Any]:
    """The catalogue: every event type with the JSON Schema of its `data`."""
    data = [{"name": t.name, "description": t.description, "schema": t.schema} for t in CATALOGUE]
    return {"data": data, "next_cursor": None}
