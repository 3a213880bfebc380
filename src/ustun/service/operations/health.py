"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from ustun.clock import rfc3339
from ustun.errors import SchemaOutOfDate
from ustun.service.plumbing.deps import DB
from ustun.service.plumbing.metrics import Metrics
from ustun.service.plumbing.problems import problem_response, problem_responses
from ustun.store.migrate import check_current
from ustun.store.reach import free_bytes

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(request: Request, db: DB) -> dict[str, Any]:
    """The process is up and serving (200 while it is); `degraded` while the database's disk
    is full, with `storage` saying since when (reads and small writes may still work)."""
    metrics: Metrics = request.app.state.metrics
    full = metrics.storage_full()
    if full is None:
        return {"status": "ok"}
    storage: dict[str, Any] = {
        "status": "full",
        "since": rfc3339(full.since),
        "last_refused_at": rfc3339(full.last_refused_at),
    }
    free = free_bytes(db)
    if free is not None:
        storage["free_bytes"] = free
    return {"status": "degraded", "storage": storage}


@router.get("/readyz", response_model=None, responses=problem_responses("not-ready"))
async def readyz(request: Request, db: DB) -> Response:
    """The database answers and its schema is the one this process expects."""
    try:
        async with db.read() as conn:
            await conn.execute(text("SELECT 1"))
        await check_current(db)
    except SchemaOutOfDate as exc:
        return problem_response(request, "not-ready", str(exc))
    except Exception as exc:
        return problem_response(request, "not-ready", f"database unreachable: {type(exc).__name__}")
    return JSONResponse({"status": "ready"})
