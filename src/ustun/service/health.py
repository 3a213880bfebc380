"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from ustun.http.errors import SchemaOutOfDate
from ustun.service.deps import DB
from ustun.service.openapi import problem_responses
from ustun.service.problems import problem_response
from ustun.store.migrate import check_current

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving."""
    return {"status": "ok"}


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
