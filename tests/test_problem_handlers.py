"""`install_problem_handlers`: ustun's errors as problem+json in a user's FastAPI app, and one
rule for the problem `type` in the handlers, the idempotency middleware and the webhook
receiver (`<problem_base>/problems/<slug>`, relative by default), and in the service."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from sqlalchemy import Column, Integer, MetaData, String, Table, insert

from support import free_port
from ustun.concurrency import Preconditions, Version, compare_and_set, require_if_match
from ustun.errors import (
    ConfigError,
    GuardRejected,
    InvalidSignature,
    NotFoundError,
    ProblemError,
    RepeatedHeaders,
)
from ustun.http.signature import Secret
from ustun.idempotency import IdempotencyMiddleware, SqlRecordStore, idempotency
from ustun.problems import install_problem_handlers
from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.receiving.inbox import MemoryInbox
from ustun.webhooks.receiving.receiver import WebhookReceiver
from webhook_support import serving_http

PROBLEM = "application/problem+json"
notes = Table(
    "notes",
    MetaData(),
    Column("id", String, primary_key=True),
    Column("text", String, nullable=False),
    Column("version", Integer, nullable=False),
)


@pytest.fixture
async def notes_db(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'notes.db'}")
    async with db.engine.begin() as conn:
        await conn.run_sync(notes.metadata.create_all)
        await conn.execute(insert(notes).values(id="n1", text="v1", version=1))
    yield db
    await db.dispose()


def notes_app(db: Database) -> FastAPI:
    """A user's app: `PUT /notes/{id}` requires If-Match and writes by compare-and-set."""
    app = FastAPI()
    install_problem_handlers(app)

    @app.put("/notes/{note_id}")
    async def put(note_id: str, request: Request) -> dict[str, str]:
        pre = Preconditions.from_headers(request.headers.items())
        require_if_match(pre)
        async with db.unit_of_work() as uow:
            row = await compare_and_set(
                uow.conn, notes, where=[notes.c.id == note_id], pre=pre, values={"text": "new"}
            )
        return {"etag": str(Version.of(row).etag)}

    return app


async def test_require_if_match_answers_428_and_412_as_problem_json_over_uvicorn(
    notes_db: Database,
) -> None:
    port = free_port()
    async with (
        serving_http(notes_app(notes_db), port),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        missing = await http.put("/notes/n1")
        assert (missing.status_code, missing.headers["content-type"]) == (428, PROBLEM)
        assert missing.json()["type"] == "/problems/precondition-required"
        assert missing.json()["header"] == "If-Match"
        written = await http.put("/notes/n1", headers={"if-match": '"1"'})
        assert written.json() == {"etag": '"2"'}
        stale = await http.put("/notes/n1", headers={"if-match": '"1"'})
        assert (stale.status_code, stale.headers["content-type"]) == (412, PROBLEM)
        assert stale.json()["type"] == "/problems/precondition-failed"
        gone = await http.put("/notes/n9", headers={"if-match": '"1"'})
        assert gone.json()["type"] == "/problems/not-found"
        # The relative type resolves against the request's URL to a page the app serves.
        page = await http.get(missing.url.join(missing.json()["type"]))
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "Precondition required" in page.text


def raising(exc: Exception) -> Callable[[], None]:
    def raise_it() -> None:
        raise exc

    return raise_it


ERRORS: dict[str, tuple[Exception, int, str]] = {
    "problem": (
        ProblemError("quota-exceeded", "Too many.", headers={"retry-after": "3"}, limit=5),
        429,
        "quota-exceeded",
    ),
    "not-found": (NotFoundError("No such note."), 404, "not-found"),
    "guard": (GuardRejected({"id": "n1"}), 409, "state-conflict"),
    "signature": (InvalidSignature("no signature matches"), 401, "webhook-signature-invalid"),
    "repeated": (RepeatedHeaders("webhook-id twice"), 400, "webhook-header-repeated"),
    "other": (ConfigError("USTUN_SECRET_KEY is too short"), 500, "internal-error"),
}


@pytest.fixture
async def every_error() -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    install_problem_handlers(app, problem_base="https://api.example.com/")
    for name, (exc, _, _) in ERRORS.items():
        app.add_api_route(f"/{name}", raising(exc))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http


@pytest.mark.parametrize("name", sorted(ERRORS))
async def test_every_ustun_error_is_a_problem(
    every_error: httpx.AsyncClient, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, status, slug = ERRORS[name]
    with caplog.at_level(logging.ERROR, logger="ustun.problems"):
        answer = await every_error.get(f"/{name}")
    assert (answer.status_code, answer.headers["content-type"]) == (status, PROBLEM)
    body = answer.json()
    assert body["type"] == f"https://api.example.com/problems/{slug}"
    assert body["status"] == status
    if name == "problem":
        assert (body["limit"], answer.headers["retry-after"]) == (5, "3")
    if name == "other":
        # The message of an internal error is logged, never shown to the caller.
        assert "USTUN_SECRET_KEY" not in answer.text
        assert "USTUN_SECRET_KEY" in caplog.text


def library_app(db: Database, problem_base: str) -> FastAPI:
    """The three parts that answer problems, on one `problem_base`."""
    app = FastAPI()
    install_problem_handlers(app, problem_base=problem_base)

    @app.post("/orders", openapi_extra=idempotency("required"))
    async def order() -> dict[str, str]:
        return {}

    @app.put("/notes/n1")
    async def put(request: Request) -> None:
        require_if_match(Preconditions.from_headers(request.headers.items()))

    receiver = WebhookReceiver(
        str(Secret.generate()), inbox=MemoryInbox(), problem_base=problem_base
    )
    app.add_route("/webhooks", receiver, methods=["POST"])
    app.add_middleware(
        IdempotencyMiddleware,
        store=SqlRecordStore(db),
        transactional=True,
        problem_base=problem_base,
    )
    return app


@pytest.mark.parametrize("base", ["", "https://api.example.com"])
async def test_the_middleware_the_receiver_and_the_handlers_agree(
    notes_db: Database, base: str
) -> None:
    transport = httpx.ASGITransport(app=library_app(notes_db, base))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        answers = {
            "idempotency-key-missing": await http.post("/orders"),
            "webhook-signature-invalid": await http.post("/webhooks", content=b"{}"),
            "precondition-required": await http.put("/notes/n1"),
        }
        for slug, answer in answers.items():
            assert answer.headers["content-type"] == PROBLEM
            assert answer.json()["type"] == f"{base}/problems/{slug}"
            if not base:
                page = await http.get(answer.json()["type"])
                assert page.status_code == 200, slug


async def test_the_service_types_its_middleware_problems_on_its_public_url(
    settings: Settings, db: Database
) -> None:
    app = create_app(settings.model_copy(update={"public_url": "https://api.example.com"}), db=db)
    key = await create_key(db, "problem-base")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://internal", headers={"authorization": f"Bearer {key}"}
    ) as http:
        missing = await http.post("/v1/payments", json={"amount": 1, "currency": "EUR"})
    assert missing.status_code == 400
    assert missing.json()["type"] == "https://api.example.com/problems/idempotency-key-missing"
