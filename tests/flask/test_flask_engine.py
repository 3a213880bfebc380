"""`Ustun(app, engine=…)`: a Flask app on a plain SQLAlchemy engine (tests/flask/apps/
plain_shop.py), its views writing through `ustun.session`, served by gunicorn on each database:
one execution per key, under concurrent duplicates too, and a raising view leaves nothing."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from example_shops import Served
from flask_support import Shop, rows

pytestmark = pytest.mark.e2e

APPS = Path(__file__).parent / "apps"


@pytest.fixture(scope="module")
def plain(shop: Shop) -> Served:
    return shop.serve(workers=2, threads=6, app="plain_shop:app", folder=APPS)


def _pay(url: str, key: str, amount: int, path: str = "/payments") -> httpx.Response:
    headers = {"Idempotency-Key": key}
    return httpx.post(f"{url}{path}", json={"amount": amount}, headers=headers, timeout=30)


def _payments(shop: Shop, amount: int) -> int:
    return len(rows(shop, "SELECT id FROM plain_payment WHERE amount = ?", amount))


def test_a_key_runs_the_view_once(shop: Shop, plain: Served) -> None:
    key, amount, n = str(uuid.uuid4()), 81, 12
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        start.wait()
        return _pay(plain.url, key, amount)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(post, range(n)))
    assert {a.status_code for a in answers} <= {201, 409}
    fresh = [a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers]
    assert len(fresh) == 1
    again = _pay(plain.url, key, amount)
    assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
    assert again.content == fresh[0].content
    assert _payments(shop, amount) == 1


def test_a_raising_view_leaves_nothing(shop: Shop, plain: Served) -> None:
    key, amount = str(uuid.uuid4()), 82
    assert _pay(plain.url, key, amount, "/raise").status_code == 500
    assert _payments(shop, amount) == 0
    assert _pay(plain.url, key, amount).status_code == 201
    assert _payments(shop, amount) == 1


def test_an_async_view_runs_once_too(shop: Shop, plain: Served) -> None:
    key, amount = str(uuid.uuid4()), 83
    first = _pay(plain.url, key, amount, "/async-payments")
    assert first.status_code == 201, first.text
    again = _pay(plain.url, key, amount, "/async-payments")
    assert (again.headers["idempotent-replayed"], again.content) == ("true", first.content)
    assert _payments(shop, amount) == 1
