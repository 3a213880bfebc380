"""The middleware in plain mode (the handler commits on its own), on every record store."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from ustun.errors import SecretKeyError
from ustun.idempotency import Found, IdempotencyMiddleware, RecordStore, idempotency
from ustun.idempotency.middleware import account_scope
from ustun.idempotency.sealing import context
from ustun.webhooks.secretbox import SecretBox


class Item(BaseModel):
    name: str


def build_app(store: RecordStore, **options: object) -> tuple[FastAPI, Counter[str]]:
    """A small app whose handlers count how often they really ran."""
    runs: Counter[str] = Counter()
    gate, started = asyncio.Event(), asyncio.Event()
    app = FastAPI()
    app.state.gate, app.state.started = gate, started

    @app.post("/items")
    async def create(item: Item) -> Response:
        runs["items"] += 1
        return JSONResponse(
            {"name": item.name, "run": runs["items"]},
            status_code=201,
            headers={
                "location": f"/items/{runs['items']}",
                "etag": '"1"',
                "last-modified": "Fri, 04 Dec 2026 12:00:00 GMT",
                "x-trace": "kept",
                "x-secret": "dropped",
            },
        )

    @app.patch("/items/{item_id}")
    async def patch(item_id: str) -> dict[str, object]:
        runs["patch"] += 1
        return {"id": item_id, "run": runs["patch"]}

    @app.post("/required", openapi_extra=idempotency("required"))
    async def required() -> dict[str, int]:
        runs["required"] += 1
        return {"run": runs["required"]}

    @app.post("/off", openapi_extra=idempotency("off"))
    async def off() -> dict[str, int]:
        runs["off"] += 1
        return {"run": runs["off"]}

    @app.post("/stream")
    async def stream() -> StreamingResponse:
        runs["stream"] += 1

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(5):
                yield f"chunk {i} of run {runs['stream']}\n".encode()

        return StreamingResponse(chunks(), media_type="text/plain")

    @app.post("/big")
    async def big() -> Response:
        runs["big"] += 1
        return Response(b"x" * 5000, media_type="text/plain", headers={"location": "/big/1"})

    @app.post("/secret")
    async def secret() -> JSONResponse:
        runs["secret"] += 1
        return JSONResponse(
            {"secret": f"whsec_run{runs['secret']}"},
            status_code=201,
            headers={"cache-control": "private, no-store"},
        )

    @app.post("/fail")
    async def fail() -> JSONResponse:
        runs["fail"] += 1
        return JSONResponse({"run": runs["fail"]}, status_code=503)

    @app.post("/boom")
    async def boom() -> None:
        runs["boom"] += 1
        raise RuntimeError("handler crashed")

    @app.post("/slow")
    async def slow() -> dict[str, int]:
        runs["slow"] += 1
        started.set()
        await gate.wait()
        return {"run": runs["slow"]}

    def scope_of(scope: dict[str, object]) -> str:
        headers = dict(scope["headers"])  # type: ignore[call-overload]
        return str(headers.get(b"x-account", b"").decode())

    app.add_middleware(
        IdempotencyMiddleware,
        store=store,
        max_body=1000,
        replay_headers=["X-Trace"],
        scope_of=scope_of,
        **options,
    )
    return app, runs


@pytest.fixture
def tenant() -> str:
    return uuid.uuid4().hex


def client_for(app: FastAPI, tenant: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(
        transport=transport, base_url="http://test", headers={"x-account": tenant}
    )


def key(value: str) -> dict[str, str]:
    return {"idempotency-key": value}


async def test_replay_has_same_status_allowed_headers_and_identical_bytes(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = await http.post("/items", json={"name": "a"}, headers=key("k1"))
        again = await http.post("/items", content=b'{ "name" : "a" }', headers=key('"k1"'))
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert runs["items"] == 1
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    for name in ("content-type", "location", "etag", "last-modified", "x-trace"):
        assert again.headers[name] == first.headers[name]
    assert "x-secret" not in again.headers
    assert again.headers["content-length"] == str(len(first.content))


async def test_response_captured_across_many_body_chunks(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = await http.post("/stream", headers=key("s"))
        again = await http.post("/stream", headers=key("s"))
    assert first.text.count("chunk") == 5
    assert again.content == first.content
    assert runs["stream"] == 1


async def test_over_limit_response_is_sent_whole_and_never_replayed_truncated(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = await http.post("/big", headers=key("b"))
        again = await http.post("/big", headers=key("b"))
    assert first.status_code == 200
    assert first.content == b"x" * 5000
    assert again.status_code == 409
    assert again.headers["content-type"] == "application/problem+json"
    assert again.json()["type"].endswith("/problems/idempotency-response-unavailable")
    assert again.json()["original_status"] == 200
    assert again.headers["location"] == "/big/1"
    assert runs["big"] == 1


async def test_a_no_store_body_is_stored_sealed_and_replayed_open(
    record_store: RecordStore, tenant: str
) -> None:
    box = SecretBox("a test master key of at least 32 characters")
    app, runs = build_app(record_store, sealer=box)
    async with client_for(app, tenant) as http:
        first = await http.post("/secret", headers=key("s1"))
        again = await http.post("/secret", headers=key("s1"))
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() == {"secret": "whsec_run1"}
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["cache-control"] == "private, no-store"
    assert runs["secret"] == 1
    found = await record_store.claim(tenant, "s1", "-", lease=30, ttl=60)
    assert isinstance(found, Found)
    assert found.record.response is not None
    kept = found.record.response.body
    assert kept is not None
    assert b"whsec_" not in kept
    assert box.open_bytes(kept, context=context(tenant, "s1")) == first.content
    with pytest.raises(SecretKeyError):  # bound to its record: no other key or scope opens it
        box.open_bytes(kept, context=context(tenant, "s2"))


async def test_without_a_sealer_a_no_store_body_is_not_kept(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = await http.post("/secret", headers=key("s1"))
        again = await http.post("/secret", headers=key("s1"))
    assert first.json() == {"secret": "whsec_run1"}
    assert again.status_code == 409
    assert again.json()["type"].endswith("/problems/idempotency-response-unavailable")
    assert "no-store" in again.json()["detail"]
    assert runs["secret"] == 1
    found = await record_store.claim(tenant, "s1", "-", lease=30, ttl=60)
    assert isinstance(found, Found)
    assert found.record.response is not None
    assert found.record.response.body is None


async def test_validation_failures_are_not_stored(record_store: RecordStore, tenant: str) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        invalid = await http.post("/items", json={"nom": "a"}, headers=key("v"))
        fixed = await http.post("/items", json={"name": "a"}, headers=key("v"))
    assert invalid.status_code == 422
    assert fixed.status_code == 201
    assert "idempotent-replayed" not in fixed.headers
    assert runs["items"] == 1


async def test_server_errors_are_stored_and_replayed_by_default(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = await http.post("/fail", headers=key("f"))
        again = await http.post("/fail", headers=key("f"))
    assert first.status_code == again.status_code == 503
    assert again.headers["idempotent-replayed"] == "true"
    assert runs["fail"] == 1


async def test_server_errors_release_the_key_when_configured(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store, store_server_errors=False)
    async with client_for(app, tenant) as http:
        await http.post("/fail", headers=key("f"))
        again = await http.post("/fail", headers=key("f"))
    assert again.status_code == 503
    assert "idempotent-replayed" not in again.headers
    assert runs["fail"] == 2


async def test_an_unhandled_error_releases_the_key(record_store: RecordStore, tenant: str) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = await http.post("/boom", headers=key("x"))
        again = await http.post("/boom", headers=key("x"))
    assert first.status_code == again.status_code == 500
    assert runs["boom"] == 2


async def test_a_duplicate_during_execution_gets_409_with_retry_after(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        first = asyncio.create_task(http.post("/slow", headers=key("w")))
        async with asyncio.timeout(10):
            await app.state.started.wait()
        busy = await http.post("/slow", headers=key("w"))
        app.state.gate.set()
        done = await first
        after = await http.post("/slow", headers=key("w"))
    assert busy.status_code == 409
    assert busy.json()["type"].endswith("/problems/idempotency-in-progress")
    assert busy.headers["retry-after"] == "1"
    assert done.status_code == 200
    assert after.content == done.content
    assert runs["slow"] == 1


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/items", {"name": "b"}), ("POST", "/stream", {"name": "a"})],
)
async def test_same_key_for_a_different_request_is_422(
    record_store: RecordStore, tenant: str, method: str, path: str, body: dict[str, str]
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        await http.post("/items", json={"name": "a"}, headers=key("r"))
        reused = await http.request(method, path, json=body, headers=key("r"))
    assert reused.status_code == 422
    assert reused.json()["type"].endswith("/problems/idempotency-key-reused")
    assert runs["items"] == 1
    assert runs["stream"] == 0


async def test_another_scope_with_the_same_key_is_a_new_operation(
    record_store: RecordStore, tenant: str
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        mine = await http.post("/items", json={"name": "a"}, headers=key("same"))
        theirs = await http.post(
            "/items", json={"name": "a"}, headers={**key("same"), "x-account": tenant + "-2"}
        )
    assert mine.status_code == theirs.status_code == 201
    assert "idempotent-replayed" not in theirs.headers
    assert runs["items"] == 2


async def test_policies(record_store: RecordStore, tenant: str) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        missing = await http.post("/required")
        assert missing.status_code == 400
        assert missing.json()["type"].endswith("/problems/idempotency-key-missing")
        assert runs["required"] == 0
        for _ in range(2):
            assert (await http.post("/required", headers=key("q"))).status_code == 200
            assert (await http.post("/items", json={"name": "a"})).status_code == 201
            off = await http.post("/off", headers=key("q"))
            assert "idempotent-replayed" not in off.headers
            await http.patch("/items/1", headers=key("p"))
    assert runs == Counter(required=1, items=2, off=2, patch=1)


@pytest.mark.parametrize(
    "headers",
    [
        [("idempotency-key", "a b")],
        [("idempotency-key", '"unterminated')],
        [("idempotency-key", "k" * 256)],
        [("idempotency-key", "a"), ("idempotency-key", "a")],
    ],
)
async def test_invalid_keys_are_400(
    record_store: RecordStore, tenant: str, headers: list[tuple[str, str]]
) -> None:
    app, runs = build_app(record_store)
    async with client_for(app, tenant) as http:
        response = await http.post("/items", json={"name": "a"}, headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "/problems/idempotency-key-invalid"
    assert runs["items"] == 0


def test_marker_documents_the_header_in_openapi() -> None:
    app, _ = build_app(None)  # type: ignore[arg-type]
    operations = app.openapi()["paths"]
    required = operations["/required"]["post"]
    assert required["x-idempotency"] == "required"
    assert {"name": "Idempotency-Key", "in": "header", "required": True}.items() <= (
        required["parameters"][0].items()
    )
    assert "parameters" not in operations["/off"]["post"]


def test_default_scope_is_the_authenticated_account() -> None:
    class Account:
        id = "acct_1"

    assert account_scope({"state": {"account": Account()}}) == "acct_1"
    assert account_scope({}) == ""


def test_transactional_mode_needs_a_sql_store(redis_store: RecordStore) -> None:
    with pytest.raises(TypeError, match="SqlRecordStore"):
        IdempotencyMiddleware(FastAPI(), redis_store, transactional=True)


async def test_unmatched_paths_and_other_methods_pass_through(
    record_store: RecordStore, tenant: str
) -> None:
    app, _ = build_app(record_store)

    @app.get("/items")
    async def list_items(request: Request) -> dict[str, str]:
        return {"ok": "yes"}

    async with client_for(app, tenant) as http:
        assert (await http.get("/items", headers=key("g"))).status_code == 200
        for _ in range(2):
            missing = await http.post("/nowhere", headers=key("n"))
            assert missing.status_code == 404
            assert "idempotent-replayed" not in missing.headers
