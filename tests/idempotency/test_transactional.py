"""Transactional mode: the handler's writes and the record's completion commit together.

Runs on SQLite and PostgreSQL, with the claim committed on its own first (the DESIGN's
sequence) and with the record written once, at commit, in the handler's transaction (the
default; on PostgreSQL under an advisory lock held from the first statement).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import insert, select, update

from ustun import clock
from ustun.errors import ProblemError
from ustun.http.fingerprint import fingerprint
from ustun.idempotency import Claimed, IdempotencyMiddleware, SqlRecordStore, StoredResponse
from ustun.idempotency.tables import idempotency_records
from ustun.service.plumbing.problems import install
from ustun.store import Database
from ustun.store.tables import accounts
from webhook_support import until


@pytest.fixture(params=[True, False], ids=["claim-first", "settle-at-commit"])
def claim_first(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


@pytest.fixture
def tenant() -> str:
    return f"tx-{uuid.uuid4().hex}"


def build_app(
    db: Database, tenant: str, claim_first: bool, gate: asyncio.Event | None = None
) -> tuple[FastAPI, Counter[str]]:
    """Handlers that write an `accounts` row named after the request, then answer as told.

    `wait` holds its transaction open until `gate` is set.
    """
    runs: Counter[str] = Counter()
    app = FastAPI()
    install(app)

    @app.post("/write/{outcome}/{name}")
    async def write(outcome: str, name: str) -> JSONResponse:
        runs[outcome] += 1
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                insert(accounts).values(id=uuid.uuid4().hex[:20], name=name, created_at=clock.now())
            )
            if outcome == "conflict":
                raise ProblemError("state-conflict", "refused after writing")
            if outcome == "crash":
                raise RuntimeError("crashed after writing")
            if outcome == "wait" and gate is not None:
                await gate.wait()
            if outcome == "steal":  # our claim is taken over while we run
                await uow.conn.execute(
                    update(idempotency_records)
                    .where(idempotency_records.c.key == name)
                    .values(lease_token="stolen")
                )
            if outcome == "race":  # another request settles the key while we run
                await SqlRecordStore(db).settle_in(
                    uow, tenant, name, "theirs", StoredResponse(200, (), b"theirs"), ttl=60
                )
        status = 500 if outcome == "server-error" else 201
        return JSONResponse({"name": name, "run": runs[outcome]}, status_code=status)

    app.add_middleware(
        IdempotencyMiddleware,
        store=SqlRecordStore(db),
        transactional=True,
        claim_first=claim_first,
        scope_of=lambda scope: tenant,
    )
    return app, runs


@pytest.fixture
async def setup(
    db: Database, tenant: str, claim_first: bool
) -> AsyncIterator[tuple[httpx.AsyncClient, Counter[str]]]:
    app, runs = build_app(db, tenant, claim_first)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http, runs


async def written(db: Database, name: str) -> bool:
    async with db.read() as conn:
        return await conn.scalar(select(accounts.c.id).where(accounts.c.name == name)) is not None


async def post(http: httpx.AsyncClient, outcome: str, name: str) -> httpx.Response:
    return await http.post(f"/write/{outcome}/{name}", headers={"idempotency-key": name})


async def test_success_commits_the_write_with_the_record(
    db: Database, setup: tuple[httpx.AsyncClient, Counter[str]], claim_first: bool
) -> None:
    http, runs = setup
    name = uuid.uuid4().hex
    first = await post(http, "ok", name)
    again = await post(http, "ok", name)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    # In both claim modes a sequential retry is answered from the record: the handler ran once.
    assert runs["ok"] == 1
    assert await written(db, name)


async def test_a_refusal_is_stored_but_its_writes_are_rolled_back(
    db: Database, setup: tuple[httpx.AsyncClient, Counter[str]], claim_first: bool
) -> None:
    http, runs = setup
    name = uuid.uuid4().hex
    first = await post(http, "conflict", name)
    again = await post(http, "conflict", name)
    assert first.status_code == again.status_code == 409
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert runs["conflict"] == 1
    assert not await written(db, name)


@pytest.mark.parametrize("outcome", ["crash", "server-error"])
async def test_errors_roll_everything_back_and_release_the_key(
    db: Database, setup: tuple[httpx.AsyncClient, Counter[str]], outcome: str
) -> None:
    http, runs = setup
    name = uuid.uuid4().hex
    first = await post(http, outcome, name)
    again = await post(http, outcome, name)
    assert first.status_code == again.status_code == 500
    assert "idempotent-replayed" not in again.headers
    assert runs[outcome] == 2
    assert not await written(db, name)


@pytest.mark.parametrize("claim_first", [True], ids=["claim-first"])
async def test_a_lost_lease_rolls_back_the_whole_transaction(
    db: Database, setup: tuple[httpx.AsyncClient, Counter[str]]
) -> None:
    http, _ = setup
    name = uuid.uuid4().hex
    lost = await post(http, "steal", name)
    assert lost.status_code == 409
    assert lost.json()["type"].endswith("/problems/idempotency-in-progress")
    assert lost.headers["retry-after"] == "1"
    assert not await written(db, name)


async def test_a_dead_holders_expired_claim_is_taken_over(
    db: Database, tenant: str, setup: tuple[httpx.AsyncClient, Counter[str]]
) -> None:
    http, runs = setup
    name = uuid.uuid4().hex
    path = f"/write/ok/{name}"
    # A process claimed this key, then died: its lease (0 s here) has run out.
    dead = await SqlRecordStore(db).claim(
        tenant, name, fingerprint("POST", path, b"", b""), lease=0, ttl=60
    )
    assert isinstance(dead, Claimed)
    response = await post(http, "ok", name)
    assert response.status_code == 201
    assert runs["ok"] == 1
    assert await written(db, name)


@pytest.mark.parametrize("claim_first", [False], ids=["settle-at-commit"])
async def test_losing_the_race_to_settle_rolls_back_and_answers_with_the_winner(
    db: Database, setup: tuple[httpx.AsyncClient, Counter[str]]
) -> None:
    http, _ = setup
    name = uuid.uuid4().hex
    lost = await post(http, "race", name)
    assert lost.status_code == 422  # the winner's fingerprint is not ours
    assert lost.json()["type"].endswith("/problems/idempotency-key-reused")
    assert not await written(db, name)


async def _started(runs: Counter[str], outcome: str) -> bool:
    return runs[outcome] >= 1


async def test_postgresql_duplicates_get_409_at_once_while_the_first_holds_the_key(
    pg: Database, tenant: str
) -> None:
    """Settling on PostgreSQL holds the key by an advisory lock: no second run, no waiting."""
    gate = asyncio.Event()
    app, runs = build_app(pg, tenant, claim_first=False, gate=gate)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        name = uuid.uuid4().hex
        first = asyncio.create_task(post(http, "wait", name))
        await until(lambda: _started(runs, "wait"), what="the first request to run")
        duplicates = await asyncio.wait_for(
            asyncio.gather(*(post(http, "wait", name) for _ in range(20))), timeout=15
        )
        assert {d.status_code for d in duplicates} == {409}
        assert {d.json()["type"].rsplit("/", 1)[1] for d in duplicates} == {
            "idempotency-in-progress"
        }
        assert {d.headers["retry-after"] for d in duplicates} == {"1"}
        assert runs["wait"] == 1
        gate.set()
        done = await first
        again = await post(http, "wait", name)
    assert done.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == done.content
    assert runs["wait"] == 1


async def test_postgresql_a_holder_whose_session_dies_frees_the_key_and_commits_nothing(
    pg: Database, tenant: str
) -> None:
    """The advisory lock and the writes end with the session: the retry runs afresh."""
    gate = asyncio.Event()
    app, runs = build_app(pg, tenant, claim_first=False, gate=gate)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        name = uuid.uuid4().hex
        first = asyncio.create_task(post(http, "wait", name))
        await until(lambda: _started(runs, "wait"), what="the first request to run")
        async with pg.autocommit() as conn:
            killed = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks"
                " WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        assert killed == 1
        gate.set()
        crashed = await first
        retried = await post(http, "ok", name)
    assert crashed.status_code == 500
    assert retried.status_code == 201
    assert runs["ok"] == 1
    async with pg.read() as conn:
        names = (await conn.execute(select(accounts.c.id).where(accounts.c.name == name))).all()
    assert len(names) == 1
