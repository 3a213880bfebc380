"""The example Litestar shop under uvicorn on each database, where requests race and servers
die: a duplicate of a running request (409 on PostgreSQL, the first's answer on SQLite), a
server killed (`kill -9`) mid-handler leaves nothing and a retry writes once; documents changed
under `If-Match` as the service's are (428, 412, 200 with the new ETag, 304), and of 12
concurrent changes from the same ETag exactly one wins."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from example_shops import Served
from flask_support import payment_events, rows
from litestar_support import Shop
from support import problem_of, wait_for

pytestmark = pytest.mark.e2e


def _pay(client: httpx.Client, key: str, amount: int, path: str) -> httpx.Response:
    return client.post(
        path, json={"amount": amount, "currency": "EUR"}, headers={"Idempotency-Key": key}
    )


def _written(shop: Shop, amount: int) -> tuple[int, int]:
    """The payments of `amount`, and their `payment.created` events."""
    paid = rows(shop, "SELECT id FROM shop_payment WHERE amount = ?", amount)
    return len(paid), len(payment_events(shop, amount))


def _faults(shop: Shop) -> Path:
    """The folder of `/faults/wait`'s files, cleared for a new run."""
    folder = Path(shop.env["SHOP_FAULTS"])
    for name in ("entered", "release"):
        (folder / name).unlink(missing_ok=True)
    return folder


def _entered(folder: Path) -> None:
    wait_for(lambda: (folder / "entered").exists(), timeout=20, what="the handler to be running")


def test_a_duplicate_of_a_running_request(shop: Shop, served: Served) -> None:
    folder = _faults(shop)
    key, amount = str(uuid.uuid4()), 201
    with served.client("ann") as ann, ThreadPoolExecutor(2) as pool:
        first = pool.submit(_pay, ann, key, amount, "/faults/wait")
        _entered(folder)
        if shop.database_url.startswith("postgresql"):
            held = _pay(ann, key, amount, "/faults/wait")
            problem_of(held, 409, "idempotency-in-progress")
            assert held.headers["retry-after"] == "1"
            (folder / "release").touch()
        else:
            # SQLite: the duplicate waits for the first's write lock, then finds its answer.
            duplicate = pool.submit(_pay, ann, key, amount, "/faults/wait")
            (folder / "release").touch()
            assert duplicate.result(30).headers["idempotent-replayed"] == "true"
        assert first.result(30).status_code == 201
    assert _written(shop, amount) == (1, 1)


def test_a_server_killed_mid_handler_leaves_what_a_retry_resolves(
    shop: Shop, served: Served
) -> None:
    folder = _faults(shop)
    own = shop.serve(workers=1)
    key, amount = str(uuid.uuid4()), 202

    def doomed() -> None:
        with own.client("ann") as ann, pytest.raises(httpx.HTTPError):
            _pay(ann, key, amount, "/faults/wait")

    thread = threading.Thread(target=doomed)
    thread.start()
    _entered(folder)
    # SIGKILL to the whole server, the process mid-handler included: no cleanup at all.
    shop.kill(own.process)
    thread.join(10)
    (folder / "release").touch()
    assert _written(shop, amount) == (0, 0)
    with served.client("ann") as ann:

        def retried() -> httpx.Response | None:
            answer = _pay(ann, key, amount, "/faults/wait")
            # PostgreSQL frees the key once it notices the killed connection is gone.
            return None if answer.status_code == 409 else answer

        answer = wait_for(retried, timeout=30, interval=0.5, what="the key to be free")
        assert answer.status_code == 201, answer.text
        again = _pay(ann, key, amount, "/faults/wait")
        assert (again.headers["idempotent-replayed"], again.json()) == ("true", answer.json())
    assert _written(shop, amount) == (1, 1)


def _document(client: httpx.Client, title: str) -> str:
    """A new document's URL."""
    made = client.post(
        "/documents", json={"title": title}, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert made.status_code == 201, made.text
    assert made.headers["etag"] == '"1"'
    location: str = made.headers["location"]
    return location


def test_a_document_changes_only_as_its_caller_saw_it(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        url = _document(ann, "draft")
        read = ann.get(url)
        assert (read.status_code, read.headers["etag"]) == (200, '"1"')
        assert "last-modified" in read.headers
        unchanged = ann.get(url, headers={"If-None-Match": '"1"'})
        assert (unchanged.status_code, unchanged.content) == (304, b"")
        assert unchanged.headers["etag"] == '"1"'
        problem_of(ann.patch(url, json={"title": "final"}), 428, "precondition-required")
        changed = ann.patch(url, json={"title": "final"}, headers={"If-Match": '"1"'})
        assert changed.status_code == 200, changed.text
        assert (changed.headers["etag"], changed.json()["title"]) == ('"2"', "final")
        stale = ann.patch(url, json={"title": "lost"}, headers={"If-Match": '"1"'})
        problem_of(stale, 412, "precondition-failed")
        problem_of(ann.patch(url, json={}, headers={"If-Match": "2"}), 400, "precondition-invalid")
        assert ann.get(url, headers={"If-None-Match": '"1"'}).json()["title"] == "final"
        problem_of(bob.get(url), 404, "not-found")
        problem_of(
            bob.patch(url, json={"title": "x"}, headers={"If-Match": '"2"'}), 404, "not-found"
        )


def test_of_concurrent_changes_from_one_etag_one_wins(served: Served) -> None:
    n = 12
    with served.client("ann") as ann:
        url = _document(ann, "contested")
    start = threading.Barrier(n)

    def change(i: int) -> httpx.Response:
        with served.client("ann") as client:
            start.wait()
            return client.patch(url, json={"title": f"by {i}"}, headers={"If-Match": '"1"'})

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(change, range(n)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] + [412] * (n - 1), statuses
    [won] = [a for a in answers if a.status_code == 200]
    assert won.headers["etag"] == '"2"'
    with served.client("ann") as ann:
        now = ann.get(url)
    assert (now.headers["etag"], now.json()["title"]) == ('"2"', won.json()["title"])
