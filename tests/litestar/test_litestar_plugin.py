"""`UstunPlugin` in the example Litestar shop served by uvicorn (2 processes) on each database:
per-handler policy from `opt`, the service's statuses and problems, keys scoped by the caller, a
404 (not a 422) on a path that does not exist, one execution (one row, one event) under
concurrent duplicates, a raising or 5xx handler leaves nothing and the key free, bad input and
ustun's errors as problem+json, the header in the OpenAPI document."""

from __future__ import annotations

import uuid

import httpx
import pytest

from example_shops import Served, executed_once, race
from flask_support import payment_events, rows
from litestar_support import Shop
from support import problem_of

pytestmark = pytest.mark.e2e


def _pay(
    client: httpx.Client, key: str | None, amount: int, path: str = "/payments"
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return client.post(path, json={"amount": amount, "currency": "EUR"}, headers=headers)


def _payments(shop: Shop, amount: int) -> int:
    return len(rows(shop, "SELECT id FROM shop_payment WHERE amount = ?", amount))


def _written(shop: Shop, amount: int) -> tuple[int, int]:
    """The payments of `amount`, and their `payment.created` events."""
    return _payments(shop, amount), len(payment_events(shop, amount))


def _key_stored(shop: Shop, key: str) -> bool:
    found = rows(shop, "SELECT key FROM idempotency_records WHERE key = ?", key)
    return bool(found)


def test_statuses_and_problems_are_the_services(shop: Shop, served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        problem_of(_pay(ann, None, 101), 400, "idempotency-key-missing")
        problem_of(_pay(ann, "x" * 300, 101), 400, "idempotency-key-invalid")
        key = str(uuid.uuid4())
        first = _pay(ann, key, 101)
        assert first.status_code == 201, first.text
        assert "idempotent-replayed" not in first.headers
        again = _pay(ann, key, 101)
        assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
        assert again.content == first.content
        problem_of(_pay(ann, key, 102), 422, "idempotency-key-reused")
        # Keys are scoped by the caller (the plugin's scope_of): bob's request with ann's key
        # is his own.
        assert _pay(bob, key, 101).status_code == 201
        # Routing comes first: a path that does not exist is a 404 whatever its key.
        assert _pay(ann, key, 101, "/nowhere").status_code == 404
        assert _written(shop, 101) == (2, 2)
        problem_of(ann.get("/payments/999999"), 404, "not-found")
        # A body Litestar refuses is a problem too, and commits nothing.
        refused = ann.post(
            "/payments", json={"amount": "many"}, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
        assert problem_of(refused, 422, "validation-error")["errors"]
    assert httpx.post(f"{served.url}/payments", headers={"Idempotency-Key": "k"}).status_code == 401


def test_concurrent_duplicates_execute_once(shop: Shop, served: Served) -> None:
    amount = 103
    executed_once(race(served.client, 12, "/payments", str(uuid.uuid4()), amount))
    assert _written(shop, amount) == (1, 1)


def test_a_raising_handler_leaves_nothing_and_the_key_free(shop: Shop, served: Served) -> None:
    key, amount = str(uuid.uuid4()), 104
    with served.client("ann") as ann:
        assert _pay(ann, key, amount, "/faults/raise").status_code == 500
        # Not stored: the retry runs the handler again (and fails again), never a replay.
        assert _pay(ann, key, amount, "/faults/raise").status_code == 500
        assert _written(shop, amount) == (0, 0)
        assert not _key_stored(shop, key)
        assert _pay(ann, key, amount).status_code == 201
    assert _written(shop, amount) == (1, 1)


def test_a_5xx_answer_rolls_back(shop: Shop, served: Served) -> None:
    key, amount = str(uuid.uuid4()), 105
    with served.client("ann") as ann:
        assert _pay(ann, key, amount, "/faults/5xx").status_code == 503
        again = _pay(ann, key, amount, "/faults/5xx")
        assert again.status_code == 503
        assert "idempotent-replayed" not in again.headers
    assert _written(shop, amount) == (0, 0)
    assert not _key_stored(shop, key)


def test_a_refused_caller_leaves_no_unit_of_work_open(shop: Shop, served: Served) -> None:
    # Litestar resolves `uow` beside a dependency that then refuses the caller (401), and
    # leaves the one it had opened unclosed: the plugin rolls it back. Left open, each held its
    # process's connection (on SQLite, its one writer) until the process's writes all waited.
    # One client: its requests go over one connection, to one process.
    with httpx.Client(base_url=served.url, auth=("ann", "ann-password"), timeout=10) as ann:
        for _ in range(12):
            assert ann.get("/faults/refused").status_code == 401
        assert _pay(ann, str(uuid.uuid4()), 106).status_code == 201
    assert _written(shop, 106) == (1, 1)


def test_the_openapi_document_shows_the_header(served: Served) -> None:
    schema = httpx.get(f"{served.url}/schema/openapi.json").json()
    [header] = [
        p for p in schema["paths"]["/payments"]["post"]["parameters"] if p["in"] == "header"
    ]
    assert (header["name"], header["required"]) == ("Idempotency-Key", True)
    read = schema["paths"]["/payments/{payment_id}"]["get"].get("parameters", [])
    assert "Idempotency-Key" not in [p["name"] for p in read]
    assert "/ustun/jobs/{job_id}/events" in schema["paths"]
