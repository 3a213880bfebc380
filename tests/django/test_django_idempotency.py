"""`@idempotent` in the example shop, served by gunicorn (4 sync workers) on each database: the
service's statuses and problems, one execution under concurrent duplicates, nothing left by a
view that fails or a server killed mid-view."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import httpx
import pytest

from django_support import Shop
from example_shops import Served, executed_once, race
from support import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(shop: Shop) -> Served:
    return shop.serve(workers=4)


def _pay(
    client: httpx.Client, key: str | None, amount: int, path: str = "/payments"
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return client.post(path, json={"amount": amount, "currency": "EUR"}, headers=headers)


def _amounts(client: httpx.Client) -> list[int]:
    found = client.get("/payments")
    assert found.status_code == 200, found.text
    return [p["amount"] for p in found.json()]


def _problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    assert body["type"] == f"/problems/{slug}"
    return body


def test_statuses_and_problems_are_the_services(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        _problem(_pay(ann, None, 5), 400, "idempotency-key-missing")
        _problem(_pay(ann, "x" * 300, 5), 400, "idempotency-key-invalid")
        key = str(uuid.uuid4())
        first = _pay(ann, key, 1001)
        assert first.status_code == 201, first.text
        assert "idempotent-replayed" not in first.headers
        again = _pay(ann, key, 1001)
        assert again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
        _problem(_pay(ann, key, 1002), 422, "idempotency-key-reused")
        # Keys are scoped by user: bob's request with ann's key is his own.
        assert _pay(bob, key, 1001).status_code == 201
        assert _amounts(ann).count(1001) == 1
        assert _amounts(bob).count(1001) == 1
        # A refused request (DRF's validation: 400) commits nothing and is not stored.
        bad = _pay(ann, (retry := str(uuid.uuid4())), -1)
        assert bad.status_code == 400
        assert _pay(ann, retry, 1003).status_code == 201


def test_concurrent_duplicates_execute_once(served: Served) -> None:
    amount = 2024
    executed_once(race(served.client, 24, "/payments", str(uuid.uuid4()), amount))
    with served.client("ann") as ann:
        assert _amounts(ann).count(amount) == 1


def test_a_failing_view_leaves_nothing_and_the_key_free(served: Served) -> None:
    key, amount = str(uuid.uuid4()), 3001
    with served.client("ann") as ann:
        assert _pay(ann, key, amount, "/faults/raise").status_code == 500
        # Not stored: the retry runs the view again (and fails again), never a replay or 409.
        assert _pay(ann, key, amount, "/faults/raise").status_code == 500
        assert amount not in _amounts(ann)
        # The same key is still free for a request that succeeds.
        assert _pay(ann, key, amount).status_code == 201
        assert _amounts(ann).count(amount) == 1


def test_a_server_killed_mid_view_leaves_what_a_retry_resolves(shop: Shop, served: Served) -> None:
    folder = Path(shop.env["SHOP_FAULTS"])
    (folder / "entered").unlink(missing_ok=True)
    (folder / "release").unlink(missing_ok=True)
    own = shop.serve(workers=2)
    key, amount = str(uuid.uuid4()), 4004

    def doomed() -> None:
        with own.client("ann") as ann, pytest.raises(httpx.HTTPError):
            _pay(ann, key, amount, "/faults/wait")

    thread = threading.Thread(target=doomed)
    thread.start()
    wait_for(lambda: (folder / "entered").exists(), timeout=20, what="the view to be running")
    shop.kill(own.process)
    thread.join(10)
    (folder / "release").touch()
    with served.client("ann") as ann:
        assert amount not in _amounts(ann)

        def retried() -> httpx.Response | None:
            answer = _pay(ann, key, amount, "/faults/wait")
            # PostgreSQL frees the key once it notices the killed worker's connection is gone.
            return None if answer.status_code == 409 else answer

        answer = wait_for(retried, timeout=30, interval=0.5, what="the key to be free")
        assert answer.status_code == 201, answer.text
        assert _pay(ann, key, amount, "/faults/wait").headers["idempotent-replayed"] == "true"
        assert _amounts(ann).count(amount) == 1


def test_inside_atomic_requests(shop: Shop) -> None:
    """With ATOMIC_REQUESTS the view's transaction is Django's; @idempotent nests in it."""
    own = shop.serve(workers=2, SHOP_ATOMIC_REQUESTS="1")
    amount = 5005
    executed_once(race(own.client, 8, "/payments", str(uuid.uuid4()), amount))
    with own.client("ann") as ann:
        failing = str(uuid.uuid4())
        assert _pay(ann, failing, amount + 1, "/faults/raise").status_code == 500
        assert _pay(ann, failing, amount + 1).status_code == 201
        assert _amounts(ann).count(amount) == 1
        assert _amounts(ann).count(amount + 1) == 1
