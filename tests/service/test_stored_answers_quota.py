"""USTUN_IDEMPOTENCY_MAX_BYTES (issue 27): 1 MiB documents with distinct keys grew SQLite to
3.46 GB. An account whose stored answers reach the quota gets 429 `quota-exceeded` for new
keys, with `Retry-After` and nothing applied; its used keys replay; other accounts go on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from ustun.service import create_app
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.service.resources.schema import documents
from ustun.settings import Settings
from ustun.store import Database

LIMIT = 5_000
DOCUMENT = {"title": "big", "body": "x" * 2_000}  # each answer stores more than 2,000 bytes


@pytest.fixture
async def app(settings: Settings, db: Database) -> AsyncIterator[FastAPI]:
    """The service with a quota of 5,000 bytes of stored answers per account."""
    limited = create_app(settings.model_copy(update={"idempotency_max_bytes": LIMIT}), db=db)
    async with limited.router.lifespan_context(limited):
        yield limited


def _client(app: FastAPI, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {key}"},
    )


async def _create(client: httpx.AsyncClient, key: str) -> httpx.Response:
    return await client.post("/v1/documents", json=DOCUMENT, headers={"idempotency-key": key})


async def test_past_the_quota_new_keys_get_429_and_used_ones_replay(
    app: FastAPI, db: Database, api_key: str
) -> None:
    other = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    async with _client(app, api_key) as client, _client(app, other) as neighbour:
        made = [await _create(client, f"doc-{n}") for n in range(3)]
        refused = await _create(client, "doc-3")
        replayed = await _create(client, "doc-0")
        calm = await _create(neighbour, "doc-3")
    assert [answer.status_code for answer in made] == [201, 201, 201]
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["type"] == "http://127.0.0.1:8000/problems/quota-exceeded"
    assert problem["limit"] == LIMIT
    assert 86_400 <= int(refused.headers["retry-after"]) <= 86_400 + 60
    assert replayed.status_code == 201
    assert replayed.headers["idempotent-replayed"] == "true"
    assert replayed.content == made[0].content
    account = await account_for_key(db, api_key)
    assert account is not None
    async with db.read() as conn:
        kept = await conn.scalar(
            select(func.count()).select_from(documents).where(documents.c.account_id == account.id)
        )
    assert kept == 3  # the refused request made no document
    assert calm.status_code == 201
