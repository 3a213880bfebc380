"""`/metrics`: the app's Prometheus registry (`ustun.service.plumbing.metrics`), read fresh."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ustun.service.plumbing.metrics import Metrics

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    """Prometheus metrics of this process, plus queue and job gauges read from the database."""
    registry: Metrics = request.app.state.metrics
    await registry.refresh(request.app.state.db)
    return Response(registry.render(), media_type=CONTENT_TYPE_LATEST)
