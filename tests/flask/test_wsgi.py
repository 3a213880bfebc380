"""`ustun.wsgi.IdempotencyMiddleware` around a plain WSGI app (tests/flask/apps/plain_wsgi.py)
served by gunicorn on each database: the service's statuses and problems, one execution under
concurrent duplicates, and a key released by an app that raises or answers 5xx."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from werkzeug.test import Client

from example_shops import Served
from flask_support import Shop, rows
from support import free_port
from ustun.wsgi import IdempotencyMiddleware

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

pytestmark = pytest.mark.e2e

APPS = Path(__file__).parent / "apps"


@pytest.fixture(scope="module")
def wsgi(shop: Shop) -> Served:
    return shop.serve(workers=2, threads=6, app="plain_wsgi:app", folder=APPS)


def _order(url: str, key: str | None, amount: int, path: str = "/orders") -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return httpx.post(f"{url}{path}", json={"amount": amount}, headers=headers, timeout=30)


def _orders(shop: Shop, amount: int) -> int:
    return len(rows(shop, "SELECT id FROM wsgi_order WHERE amount = ?", amount))


def _problem(response: httpx.Response, status: int, slug: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == f"/problems/{slug}"


def test_statuses_and_problems(shop: Shop, wsgi: Served) -> None:
    _problem(_order(wsgi.url, None, 1), 400, "idempotency-key-missing")
    _problem(_order(wsgi.url, "x" * 300, 1), 400, "idempotency-key-invalid")
    key = str(uuid.uuid4())
    first = _order(wsgi.url, key, 91)
    assert first.status_code == 201
    assert "idempotent-replayed" not in first.headers
    again = _order(wsgi.url, key, 91)
    assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
    assert (again.content, again.headers["content-type"]) == (first.content, "application/json")
    _problem(_order(wsgi.url, key, 92), 422, "idempotency-key-reused")
    assert _orders(shop, 91) == 1


def test_concurrent_duplicates_execute_once(shop: Shop, wsgi: Served) -> None:
    key, amount, n = str(uuid.uuid4()), 93, 12
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        start.wait()
        return _order(wsgi.url, key, amount)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(post, range(n)))
    assert {a.status_code for a in answers} <= {201, 409}
    fresh = [a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers]
    assert len(fresh) == 1
    for answer in answers:
        if answer.status_code == 409:
            _problem(answer, 409, "idempotency-in-progress")
    assert _orders(shop, amount) == 1


def test_a_raise_or_a_5xx_releases_the_key(shop: Shop, wsgi: Served) -> None:
    for path, status in (("/orders/raise", 500), ("/orders/fail", 503)):
        key = str(uuid.uuid4())
        assert _order(wsgi.url, key, 94, path).status_code == status
        # Released: the same request runs again rather than being replayed or refused 409.
        again = _order(wsgi.url, key, 94, path)
        assert again.status_code == status
        assert "idempotent-replayed" not in again.headers
        assert not rows(shop, "SELECT key FROM idempotency_records WHERE key = ?", key)


def test_postgresql_out_of_reach_is_503_and_nothing_runs() -> None:
    """psycopg's refused connection (no SQLSTATE) is an outage, as asyncpg's is for the service."""
    ran: list[bool] = []

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        ran.append(True)
        start_response("201 Created", [("Content-Type", "application/json")])
        return [b"{}"]

    down = IdempotencyMiddleware(app, f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    answer = Client(down).post("/orders", json={"amount": 1}, headers={"Idempotency-Key": "k"})
    assert answer.status_code == 503
    assert answer.content_type == "application/problem+json"
    assert answer.json is not None
    assert answer.json["type"] == "/problems/database-unavailable"
    assert answer.headers["Retry-After"] == "2"
    assert ran == []
