"""Transactional mode on an `optional` route: with a key or without one, the handler's writes
commit with a 2xx answer and roll back on an exception or a refusal, on SQLite and PostgreSQL.

Without a key the handler's unit of work used to commit on its own, so a write followed by an
exception stayed; with a key it was rolled back.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import insert, select

from ustun import clock
from ustun.errors import StateConflictError
from ustun.idempotency import IdempotencyMiddleware, SqlRecordStore, idempotency
from ustun.problems import install_problem_handlers
from ustun.store import Database
from ustun.store.tables import accounts


def build_app(db: Database) -> FastAPI:
    """`POST /write/{outcome}/{name}` writes an `accounts` row named `name` in a unit of work
    that ends before the handler decides how to answer."""
    app = FastAPI()
    install_problem_handlers(app)

    @app.post("/write/{outcome}/{name}", status_code=201, openapi_extra=idempotency("optional"))
    async def write(outcome: str, name: str) -> dict[str, str]:
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                insert(accounts).values(id=uuid.uuid4().hex[:20], name=name, created_at=clock.now())
            )
        if outcome == "crash":
            raise RuntimeError("crashed after writing")
        if outcome == "conflict":
            raise StateConflictError("refused after writing")
        return {"name": name}

    app.add_middleware(
        IdempotencyMiddleware,
        store=SqlRecordStore(db),
        transactional=True,
        scope_of=lambda scope: "optional-without-key",
    )
    return app


@pytest.fixture
async def http(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(db), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


async def written(db: Database, name: str) -> bool:
    async with db.read() as conn:
        return await conn.scalar(select(accounts.c.id).where(accounts.c.name == name)) is not None


@pytest.fixture(params=[True, False], ids=["with-key", "without-key"])
def keyed(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


@pytest.mark.parametrize(
    ("outcome", "status", "kept"),
    [("ok", 201, True), ("crash", 500, False), ("conflict", 409, False)],
)
async def test_the_writes_commit_with_the_answer_with_or_without_a_key(
    db: Database, http: httpx.AsyncClient, keyed: bool, outcome: str, status: int, kept: bool
) -> None:
    name = uuid.uuid4().hex
    headers = {"idempotency-key": name} if keyed else {}
    answer = await http.post(f"/write/{outcome}/{name}", headers=headers)
    assert answer.status_code == status, answer.text
    assert await written(db, name) is kept
