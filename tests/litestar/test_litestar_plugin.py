"""`UstunPlugin` in a Litestar app served by uvicorn (2 processes) on each database: per-handler
policy from `opt`, the service's statuses and problems, a 404 (not a 422) on a path that does
not exist, one execution under concurrent duplicates, a raising handler leaves nothing and the
key free, ustun's errors as problem+json, the header in the OpenAPI document."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from support import sync_connection

pytestmark = pytest.mark.e2e


def _pay(url: str, key: str | None, amount: int, path: str = "/payments") -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return httpx.post(f"{url}{path}", json={"amount": amount}, headers=headers, timeout=30)


def _payments(database_url: str, amount: int) -> int:
    with sync_connection(database_url) as conn, conn.cursor() as cursor:
        style = "?" if database_url.startswith("sqlite") else "%s"
        cursor.execute(f"SELECT id FROM litestar_payment WHERE amount = {style}", (amount,))
        return len(cursor.fetchall())


def _problem(response: httpx.Response, status: int, slug: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == f"/problems/{slug}"


def test_statuses_and_problems(database_url: str, served: str) -> None:
    _problem(_pay(served, None, 1), 400, "idempotency-key-missing")
    key = str(uuid.uuid4())
    first = _pay(served, key, 101)
    assert first.status_code == 201, first.text
    again = _pay(served, key, 101)
    assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
    assert again.content == first.content
    _problem(_pay(served, key, 102), 422, "idempotency-key-reused")
    # Routing comes first: a path that does not exist is a 404 whatever its key.
    assert _pay(served, key, 101, "/nowhere").status_code == 404
    assert _payments(database_url, 101) == 1
    _problem(httpx.get(f"{served}/payments/999999"), 404, "not-found")


def test_concurrent_duplicates_execute_once(database_url: str, served: str) -> None:
    key, amount, n = str(uuid.uuid4()), 103, 12
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        start.wait()
        return _pay(served, key, amount)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(post, range(n)))
    assert {a.status_code for a in answers} <= {201, 409}, [a.status_code for a in answers]
    fresh = [a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers]
    assert len(fresh) == 1
    assert _payments(database_url, amount) == 1


def test_a_raising_handler_leaves_nothing_and_the_key_free(database_url: str, served: str) -> None:
    key, amount = str(uuid.uuid4()), 104
    assert _pay(served, key, amount, "/raise").status_code == 500
    assert _pay(served, key, amount, "/raise").status_code == 500
    assert _payments(database_url, amount) == 0
    assert _pay(served, key, amount).status_code == 201
    assert _payments(database_url, amount) == 1


def test_the_openapi_document_shows_the_header(served: str) -> None:
    schema = httpx.get(f"{served}/schema/openapi.json").json()
    [header] = [
        p for p in schema["paths"]["/payments"]["post"]["parameters"] if p["in"] == "header"
    ]
    assert (header["name"], header["required"]) == ("Idempotency-Key", True)
    read = schema["paths"]["/payments/{payment_id}"]["get"].get("parameters", [])
    assert "Idempotency-Key" not in [p["name"] for p in read]
