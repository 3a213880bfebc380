"""`update()`: read, change, write with If-Match, re-apply on 412 — against a local document API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_servers import ThreadedServer
from ustun.client import ApiError, AsyncClient, Backoff, Client, UpdateConflict


class Documents:
    """A tiny document store with strong ETags and If-Match, like /v1/documents."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, str]] = []  # method, content type, body

    def _answer(self, doc: dict[str, Any], status: int = 200) -> Response:
        return JSONResponse(doc, status, headers={"ETag": f'"{doc["version"]}"'})

    async def endpoint(self, request: Request) -> Response:
        raw = await request.body()  # the last await: from here on, check-and-set is atomic
        doc = self.docs.get(request.path_params["id"])
        if doc is None:
            body = {"type": "/problems/not-found", "title": "Not found", "status": 404}
            return JSONResponse(body, 404, media_type="application/problem+json")
        if request.method == "GET":
            return self._answer(doc)
        self.writes.append((request.method, request.headers.get("content-type", ""), raw.decode()))
        if request.headers.get("if-match") != f'"{doc["version"]}"':
            body = {
                "type": "/problems/precondition-failed",
                "title": "Precondition failed",
                "status": 412,
                "detail": "changed",
            }
            return JSONResponse(body, 412, media_type="application/problem+json")
        change = json.loads(raw)
        new = {**doc, **change} if request.method == "PATCH" else {**change}
        new = {k: v for k, v in new.items() if v is not None}
        new["id"], new["version"] = doc["id"], doc["version"] + 1
        self.docs[doc["id"]] = new
        return self._answer(new)


@pytest.fixture(scope="module")
def documents() -> Iterator[tuple[Documents, str]]:
    store = Documents()
    app = Starlette(routes=[Route("/docs/{id}", store.endpoint, methods=["GET", "PUT", "PATCH"])])
    with ThreadedServer(app) as server:
        yield store, server.base_url


@pytest.fixture
def store(documents: tuple[Documents, str]) -> Documents:
    store, _ = documents
    store.docs = {"d": {"id": "d", "version": 1, "count": 0, "tags": []}}
    store.writes = []
    return store


@pytest.fixture
def base_url(documents: tuple[Documents, str]) -> str:
    return documents[1]


def bump(doc: dict[str, Any]) -> dict[str, Any]:
    return {"count": doc["count"] + 1, "tags": doc["tags"]}


def test_eight_concurrent_updaters_lose_no_update(store: Documents, base_url: str) -> None:
    def updater(_: int) -> Any:
        with Client(base_url=base_url) as client:
            return client.update("/docs/d", bump, attempts=8)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(updater, range(8)))
    assert store.docs["d"]["count"] == 8
    assert sorted(r["count"] for r in results) == list(range(1, 9))


async def test_eight_concurrent_async_updaters_lose_no_update(
    store: Documents, base_url: str
) -> None:
    async with AsyncClient(base_url=base_url) as client:
        await asyncio.gather(*(client.update("/docs/d", bump, attempts=8) for _ in range(8)))
    assert store.docs["d"]["count"] == 8


def test_patch_sends_a_merge_patch_with_if_match(store: Documents, base_url: str) -> None:
    with Client(base_url=base_url) as client:
        done = client.update("/docs/d", lambda d: {**d, "count": 5, "tags": None}, method="PATCH")
    assert done == {"id": "d", "version": 2, "count": 5}
    ((method, media, body),) = store.writes
    assert (method, media) == ("PATCH", "application/merge-patch+json")
    assert json.loads(body) == {"count": 5, "tags": None}


def test_losing_every_round_raises_update_conflict(store: Documents, base_url: str) -> None:
    def meddle(doc: dict[str, Any]) -> dict[str, Any]:
        store.docs["d"] = {**store.docs["d"], "version": store.docs["d"]["version"] + 1}
        return bump(doc)

    with Client(base_url=base_url) as client, pytest.raises(UpdateConflict) as raised:
        client.update("/docs/d", meddle, attempts=3)
    assert len(store.writes) == 3
    assert raised.value.status == 412
    assert raised.value.type == "/problems/precondition-failed"


def test_a_missing_document_is_an_api_error(store: Documents, base_url: str) -> None:
    with (
        Client(base_url=base_url, retry=Backoff(attempts=1)) as client,
        pytest.raises(ApiError) as raised,
    ):
        client.update("/docs/nope", bump)
    assert raised.value.status == 404
    assert not isinstance(raised.value, UpdateConflict)
