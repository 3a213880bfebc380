"""`ustun.wsgi.IdempotencyMiddleware` keeping its records in Redis (127.0.0.1:6379), around the
plain WSGI app of tests/flask/apps/plain_wsgi.py (its orders in SQLite) served by gunicorn: a
fresh answer then its replay, 422 for another body, one execution among concurrent
duplicates, a key released by an app that raises, the TTL, the same records as the async
store's, and 503 when Redis is not there. Each module run keeps its keys under a prefix of its
own, deleted afterwards."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from example_shops import Served, executed_once
from flask_support import Shop, rows
from support import free_port, wait_for
from ustun.errors import ConfigError
from ustun.http.fingerprint import fingerprint
from ustun.idempotency.records import Claimed, Found, State
from ustun.idempotency.redis_store import RedisRecordStore, record_keys
from ustun.wsgi import IdempotencyMiddleware

pytestmark = pytest.mark.e2e

APPS = Path(__file__).parent / "apps"
REDIS_URL = os.environ.get("USTUN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def prefix() -> Iterator[str]:
    """A key prefix no other test (or test worker) uses; its keys are deleted afterwards."""
    prefix = f"ustun-test:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[Shop]:
    """The app's orders in a SQLite file of their own; its records in Redis under `prefix`."""
    folder = tmp_path_factory.mktemp("wsgi-redis")
    url = f"sqlite:///{folder / 'orders.sqlite3'}"
    env = {
        **os.environ,
        "SHOP_DATABASE_URL": url,
        "WSGI_RECORDS_URL": REDIS_URL,
        "WSGI_REDIS_PREFIX": prefix,
    }
    shop = Shop(url, env, folder)
    try:
        yield shop
    finally:
        shop.stop_all()


@pytest.fixture(scope="module")
def wsgi(orders: Shop) -> Served:
    return orders.serve(workers=3, threads=6, app="plain_wsgi:app", folder=APPS)


@pytest.fixture
def store(prefix: str) -> Iterator[redis.Redis]:
    """A client of the Redis the app keeps its records in."""
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


def _order(url: str, key: str, body: dict[str, Any], path: str = "/orders") -> httpx.Response:
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    return httpx.post(f"{url}{path}", content=json.dumps(body), headers=headers, timeout=30)


def _orders(shop: Shop, amount: int) -> int:
    return len(rows(shop, "SELECT id FROM wsgi_order WHERE amount = ?", amount))


def _record(client: redis.Redis, prefix: str, key: str) -> dict[bytes | str, bytes | str]:
    """The hash of `key`'s record (the app's keys are all in the scope "")."""
    return client.hgetall(record_keys(prefix, "", key)[0])


def _problem(response: httpx.Response, status: int, slug: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == f"/problems/{slug}"


def test_stored_replayed_and_refused_for_another_body(
    orders: Shop, wsgi: Served, store: redis.Redis, prefix: str
) -> None:
    key = str(uuid.uuid4())
    first = _order(wsgi.url, key, {"amount": 201})
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    record = _record(store, prefix, key)
    assert (record[b"state"], record[b"status"], record[b"body"]) == (
        b"completed",
        b"201",
        first.content,
    )
    again = _order(wsgi.url, key, {"amount": 201})
    assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
    assert (again.content, again.headers["content-type"]) == (first.content, "application/json")
    _problem(_order(wsgi.url, key, {"amount": 202}), 422, "idempotency-key-reused")
    assert (_orders(orders, 201), _orders(orders, 202)) == (1, 0)


def test_the_async_store_shares_the_records(wsgi: Served, prefix: str) -> None:
    """One protocol: what the WSGI middleware stored, the ASGI middleware's store finds, and a
    key that store claimed is in progress to the WSGI middleware."""
    stored, claimed = str(uuid.uuid4()), str(uuid.uuid4())
    body = {"amount": 204}
    request_print = fingerprint("POST", "/orders", b"", json.dumps(body).encode())
    first = _order(wsgi.url, stored, {"amount": 203})
    assert first.status_code == 201, first.text

    async def use_the_async_store() -> tuple[Any, Any]:
        async_store = RedisRecordStore.from_url(REDIS_URL, prefix=prefix)
        try:
            found = await async_store.claim("", stored, "-", lease=30, ttl=60)
            ours = await async_store.claim("", claimed, request_print, lease=30, ttl=60)
        finally:
            await async_store.close()
        return found, ours

    found, ours = asyncio.run(use_the_async_store())
    assert isinstance(ours, Claimed)
    assert isinstance(found, Found)
    assert found.record.state is State.COMPLETED
    assert found.record.response is not None
    assert (found.record.response.status, found.record.response.body) == (201, first.content)
    held = _order(wsgi.url, claimed, body)
    _problem(held, 409, "idempotency-in-progress")
    assert "retry-after" in held.headers
    _problem(_order(wsgi.url, claimed, {"amount": 0}), 422, "idempotency-key-reused")


def test_concurrent_duplicates_execute_once(orders: Shop, wsgi: Served) -> None:
    """16 requests under one key at once, across 3 gunicorn workers, while the first runs for
    half a second: one runs the app, the others get 409 with Retry-After or its replay."""
    key, amount, n = str(uuid.uuid4()), 205, 16
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        start.wait()
        return _order(wsgi.url, key, {"amount": amount, "hold": 0.5})

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(post, range(n)))
    executed_once(answers)
    assert any(a.status_code == 409 for a in answers), "no duplicate came while the first ran"
    assert _orders(orders, amount) == 1


def test_an_exception_or_a_5xx_releases_the_key(
    wsgi: Served, store: redis.Redis, prefix: str
) -> None:
    for path, status in (("/orders/raise", 500), ("/orders/fail", 503)):
        key = str(uuid.uuid4())
        assert _order(wsgi.url, key, {"amount": 206}, path).status_code == status
        assert _record(store, prefix, key) == {}
        # Released: the same request runs again rather than being replayed or refused 409.
        again = _order(wsgi.url, key, {"amount": 206}, path)
        assert again.status_code == status
        assert "idempotent-replayed" not in again.headers


def test_a_record_lives_its_ttl(orders: Shop, store: redis.Redis, prefix: str) -> None:
    """With `ttl=1` the record expires in Redis within a second; the key then runs afresh."""
    served = _serve(orders, WSGI_TTL="1")
    key, amount = str(uuid.uuid4()), 207
    assert _order(served.url, key, {"amount": amount}).status_code == 201
    name = record_keys(prefix, "", key)[0]
    assert 0 < store.pttl(name) <= 1000
    wait_for(lambda: store.exists(name) == 0, timeout=10, what="the record to expire")
    again = _order(served.url, key, {"amount": amount})
    assert again.status_code == 201
    assert "idempotent-replayed" not in again.headers
    assert _orders(orders, amount) == 2


def test_redis_out_of_reach_is_503_and_nothing_runs(orders: Shop) -> None:
    served = _serve(orders, WSGI_RECORDS_URL=f"redis://127.0.0.1:{free_port()}/0")
    answer = _order(served.url, str(uuid.uuid4()), {"amount": 208})
    _problem(answer, 503, "database-unavailable")
    assert answer.headers["retry-after"] == "2"
    assert "Redis" in answer.json()["detail"]
    assert _orders(orders, 208) == 0


def test_a_malformed_redis_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Redis URL is not valid: Port could not be cast"):
        IdempotencyMiddleware(lambda environ, start: [], "redis://127.0.0.1:notaport/0")


def _serve(orders: Shop, **env: str) -> Served:
    """The app under one more gunicorn (one worker), with `env` added to its environment."""
    shop = Shop(orders.database_url, {**orders.env, **env}, orders.log_dir, orders.processes)
    return shop.serve(workers=1, threads=2, app="plain_wsgi:app", folder=APPS)
