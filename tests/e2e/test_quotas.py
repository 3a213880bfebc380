"""Per-account quotas against two real `ustun serve` processes on one database, both backends.

The endpoint cap and the test-ping rate are counted in the database, so many concurrent
requests spread over two processes get exactly the allowed number through.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from support import Server
from ustun.http.retry_after import parse_retry_after
from ustun.service.plumbing.accounts import create_key
from ustun.store import Database

pytestmark = pytest.mark.e2e
MAX_ENDPOINTS = 5
PINGS_PER_MINUTE = 4
RACERS = 16
LIMITS = {
    "USTUN_MAX_ENDPOINTS": str(MAX_ENDPOINTS),
    "USTUN_TEST_PINGS_PER_MINUTE": str(PINGS_PER_MINUTE),
}


@pytest.fixture(scope="module")
def servers(module_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two server processes on one database with small quotas: their base URLs."""
    tmp = tmp_path_factory.mktemp("quotas")
    started = [
        Server(module_database, tmp / f"serve-{n}.log", "--no-worker", **LIMITS).start()
        for n in range(2)
    ]
    try:
        yield [server.base_url for server in started]
    finally:
        for server in started:
            server.stop()


async def _clients(database_url: str, servers: list[str]) -> list[httpx.AsyncClient]:
    """One client per server, all with the key of a new account of their own."""
    db = Database(database_url)
    try:
        key = await create_key(db, f"quota-{uuid.uuid4().hex[:12]}")
    finally:
        await db.dispose()
    auth = {"authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=RACERS)
    return [httpx.AsyncClient(base_url=b, headers=auth, limits=limits, timeout=30) for b in servers]


def _assert_too_many(answer: httpx.Response, slug: str, most: float) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith(f"/problems/{slug}")
    wait = parse_retry_after(answer.headers.get("retry-after"))
    assert wait is not None
    assert 1 <= wait <= most


async def test_the_endpoint_cap_holds_under_concurrent_creates(
    module_database: str, servers: list[str]
) -> None:
    clients = await _clients(module_database, servers)
    try:
        answers = await asyncio.gather(
            *(
                clients[n % 2].post("/v1/webhook-endpoints", json={"url": f"https://h.example/{n}"})
                for n in range(RACERS)
            )
        )
        made = [a for a in answers if a.status_code == 201]
        assert len(made) == MAX_ENDPOINTS, sorted(a.status_code for a in answers)
        for refused in (a for a in answers if a.status_code != 201):
            _assert_too_many(refused, "quota-exceeded", 3600)
            assert refused.json()["limit"] == MAX_ENDPOINTS
        listed = (await clients[0].get("/v1/webhook-endpoints", params={"limit": 100})).json()
        assert len(listed["data"]) == MAX_ENDPOINTS

        gone = made[0]
        deleted = await clients[1].delete(
            gone.headers["location"], headers={"if-match": gone.headers["etag"]}
        )
        assert deleted.status_code == 204
        again = await clients[0].post("/v1/webhook-endpoints", json={"url": "https://h.example/"})
        assert again.status_code == 201
    finally:
        for client in clients:
            await client.aclose()


async def test_test_pings_are_rate_limited_per_account_across_processes(
    module_database: str, servers: list[str]
) -> None:
    clients = await _clients(module_database, servers)
    try:
        made = await clients[0].post(
            "/v1/webhook-endpoints", json={"url": "https://hooks.example.com/ping"}
        )
        ping = f"{made.headers['location']}/test"
        answers = await asyncio.gather(*(clients[n % 2].post(ping) for n in range(RACERS)))
        assert sorted(a.status_code for a in answers) == [202] * PINGS_PER_MINUTE + [429] * (
            RACERS - PINGS_PER_MINUTE
        )
        for refused in (a for a in answers if a.status_code == 429):
            _assert_too_many(refused, "rate-limited", 60)
        logged = await clients[1].get("/v1/events", params={"type": "ping", "limit": 100})
        assert len(logged.json()["data"]) == PINGS_PER_MINUTE
    finally:
        for client in clients:
            await client.aclose()
