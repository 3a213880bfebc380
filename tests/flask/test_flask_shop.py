"""The example Flask shop served by gunicorn (4 processes of 6 threads) on each database:
`@idempotent`'s statuses and problems are the service's, concurrent duplicates run once, a view
that raises, answers 5xx or dies with its server leaves nothing and the key free; `conditional`
answers as the service does."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from example_shops import Served, executed_once, race
from flask_support import Shop, payment_events, rows
from support import wait_for

pytestmark = pytest.mark.e2e


def _pay(
    client: httpx.Client, key: str | None, amount: int, path: str = "/payments"
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return client.post(path, json={"amount": amount, "currency": "EUR"}, headers=headers)


def _problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    assert body["type"] == f"/problems/{slug}"
    return body


def _payments(shop: Shop, amount: int) -> int:
    return len(rows(shop, "SELECT id FROM payment WHERE amount = ?", amount))


def _key_stored(shop: Shop, key: str) -> bool:
    return bool(rows(shop, "SELECT key FROM idempotency_records WHERE key = ?", key))


def test_statuses_and_problems_are_the_services(shop: Shop, served: Served) -> None:
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
        # Keys are scoped by user (USTUN_IDEMPOTENCY_SCOPE): bob's request with ann's key is his.
        assert _pay(bob, key, 1001).status_code == 201
        assert _payments(shop, 1001) == 2
        assert len(payment_events(shop, 1001)) == 2
        # A request the view refuses (an unreadable body: 400) commits nothing, stores nothing.
        retry = str(uuid.uuid4())
        headers = {"Idempotency-Key": retry, "Content-Type": "application/json"}
        bad = ann.post("/payments", content=b"{", headers=headers)
        assert bad.status_code == 400
        assert not _key_stored(shop, retry)
        assert _pay(ann, retry, 1003).status_code == 201


def test_concurrent_duplicates_execute_once(shop: Shop, served: Served) -> None:
    amount = 2024
    executed_once(race(served.client, 24, "/payments", str(uuid.uuid4()), amount))
    assert _payments(shop, amount) == 1
    assert len(payment_events(shop, amount)) == 1


def test_a_raising_view_commits_nothing_and_frees_the_key(shop: Shop, served: Served) -> None:
    key, amount = str(uuid.uuid4()), 3001
    with served.client("ann") as ann:
        assert _pay(ann, key, amount, "/faults/raise").status_code == 500
        # Not stored: the retry runs the view again (and fails again), never a replay or 409.
        assert _pay(ann, key, amount, "/faults/raise").status_code == 500
        assert (_payments(shop, amount), len(payment_events(shop, amount))) == (0, 0)
        assert not _key_stored(shop, key)
        # The same key is still free for a request that succeeds.
        assert _pay(ann, key, amount).status_code == 201
    assert (_payments(shop, amount), len(payment_events(shop, amount))) == (1, 1)


def test_a_5xx_answer_rolls_back(shop: Shop, served: Served) -> None:
    key, amount = str(uuid.uuid4()), 3002
    with served.client("ann") as ann:
        assert _pay(ann, key, amount, "/faults/5xx").status_code == 503
        again = _pay(ann, key, amount, "/faults/5xx")
        assert again.status_code == 503
        assert "idempotent-replayed" not in again.headers
    assert (_payments(shop, amount), len(payment_events(shop, amount))) == (0, 0)
    assert not _key_stored(shop, key)


def _entered(folder: Path) -> None:
    wait_for(lambda: (folder / "entered").exists(), timeout=20, what="the view to be running")


def test_a_duplicate_of_a_running_request(shop: Shop, served: Served) -> None:
    folder = Path(shop.env["SHOP_FAULTS"])
    (folder / "entered").unlink(missing_ok=True)
    (folder / "release").unlink(missing_ok=True)
    key, amount = str(uuid.uuid4()), 5005
    with served.client("ann") as ann, ThreadPoolExecutor(2) as pool:
        first = pool.submit(_pay, ann, key, amount, "/faults/wait")
        _entered(folder)
        if shop.database_url.startswith("postgresql"):
            held = _pay(ann, key, amount, "/faults/wait")
            _problem(held, 409, "idempotency-in-progress")
            assert held.headers["retry-after"] == "1"
            (folder / "release").touch()
        else:
            # SQLite: the duplicate waits for the first's write lock, then finds its answer.
            duplicate = pool.submit(_pay, ann, key, amount, "/faults/wait")
            (folder / "release").touch()
            held = duplicate.result(30)
            assert held.headers["idempotent-replayed"] == "true"
        assert first.result(30).status_code == 201
    assert _payments(shop, amount) == 1


def test_a_server_killed_mid_view_leaves_what_a_retry_resolves(shop: Shop, served: Served) -> None:
    folder = Path(shop.env["SHOP_FAULTS"])
    (folder / "entered").unlink(missing_ok=True)
    (folder / "release").unlink(missing_ok=True)
    own = shop.serve(workers=1)
    key, amount = str(uuid.uuid4()), 4004

    def doomed() -> None:
        with own.client("ann") as ann, pytest.raises(httpx.HTTPError):
            _pay(ann, key, amount, "/faults/wait")

    thread = threading.Thread(target=doomed)
    thread.start()
    _entered(folder)
    # SIGKILL to the whole server, the worker mid-view included.
    shop.kill(own.process)
    thread.join(10)
    (folder / "release").touch()
    assert _payments(shop, amount) == 0
    with served.client("ann") as ann:

        def retried() -> httpx.Response | None:
            answer = _pay(ann, key, amount, "/faults/wait")
            # PostgreSQL frees the key once it notices the killed worker's connection is gone.
            return None if answer.status_code == 409 else answer

        answer = wait_for(retried, timeout=30, interval=0.5, what="the key to be free")
        assert answer.status_code == 201, answer.text
        assert _pay(ann, key, amount, "/faults/wait").headers["idempotent-replayed"] == "true"
    assert (_payments(shop, amount), len(payment_events(shop, amount))) == (1, 1)


def test_conditional_writes_under_if_match(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        made = _pay(ann, str(uuid.uuid4()), 6006).json()
        url = f"/payments/{made['id']}"
        read = ann.get(url)
        assert read.status_code == 200
        assert read.headers["etag"] == '"1"'
        assert ann.get(url, headers={"If-None-Match": '"1"'}).status_code == 304
        _problem(ann.patch(url, json={"note": "paid"}), 428, "precondition-required")
        changed = ann.patch(url, json={"note": "paid"}, headers={"If-Match": '"1"'})
        assert changed.status_code == 200, changed.text
        assert (changed.headers["etag"], changed.json()["note"]) == ('"2"', "paid")
        stale = ann.patch(url, json={"note": "lost"}, headers={"If-Match": '"1"'})
        _problem(stale, 412, "precondition-failed")
        assert ann.get(url).json()["note"] == "paid"
        _problem(bob.get(url), 404, "not-found")


def test_endpoint_options_are_checked_as_the_services_body(shop: Shop, served: Served) -> None:
    """`endpoints.create`'s options are `EndpointIn`'s fields: an unknown one, a wrong type and
    a bad URL are each a 422 `validation-error` naming the field, and nothing is written; the
    known ones are the endpoint's."""

    def register(client: httpx.Client, body: dict[str, object]) -> httpx.Response:
        key = {"Idempotency-Key": str(uuid.uuid4())}
        return client.post("/webhook-endpoints", json=body, headers=key)

    def refused(response: httpx.Response) -> list[str]:
        body = _problem(response, 422, "validation-error")
        fields = [error["field"] for error in body["errors"]]  # type: ignore[attr-defined]
        assert str(body["detail"]).startswith(f"Invalid value in {', '.join(fields)}")
        return fields

    url = "http://127.0.0.1:9/options"
    before = rows(shop, "SELECT id FROM webhook_endpoints")
    with served.client("bob") as bob:
        assert refused(register(bob, {"url": url, "colour": "red"})) == ["body.colour"]
        assert refused(register(bob, {"url": url, "max_in_flight": "many"})) == [
            "body.max_in_flight"
        ]
        assert refused(register(bob, {"url": url, "ordering": "random"})) == ["body.ordering"]
        assert refused(register(bob, {"url": url, "events": ["Payment Created"]})) == [
            "body.events"
        ]
        assert refused(register(bob, {"url": "ftp://example.com/hooks"})) == ["body.url"]
        assert rows(shop, "SELECT id FROM webhook_endpoints") == before

        options = {"description": "with options", "ordering": "fifo", "max_in_flight": 2.0}
        made = register(bob, {"url": url, "events": ["payment.*"], **options})
        assert made.status_code == 201, made.text
    [stored] = rows(
        shop,
        "SELECT url, description, ordering, max_in_flight FROM webhook_endpoints WHERE id = ?",
        made.json()["id"],
    )
    assert stored == (url, "with options", "fifo", 2)
