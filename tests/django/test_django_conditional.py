"""`ConditionalMixin` in the example shop's documents, served by gunicorn (4 sync workers) on each
database: ETags from the version, 304, and writes that need a current `If-Match` (428, 400, 412),
made by one compare-and-set, so concurrent writers with the same tag get one success."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import make_url

from django_support import Shop
from example_shops import Served
from support import problem_of, wait_for

pytestmark = pytest.mark.e2e

WORKERS = 4

WRITES: list[tuple[str, dict[str, Any]]] = [
    ("PATCH", {"json": {"body": "edited"}}),
    ("PUT", {"json": {"title": "Replaced", "body": "edited"}}),
    ("DELETE", {}),
]


@pytest.fixture(scope="module")
def served(shop: Shop) -> Served:
    return shop.serve(workers=WORKERS)


def _create(client: httpx.Client, title: str = "Plan", body: str = "first") -> str:
    """A new document of the client's user, checked; its URL."""
    created = client.post("/documents", json={"title": title, "body": body})
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"1"'
    assert created.json()["version"] == 1
    return f"/documents/{created.json()['id']}"


def _current(client: httpx.Client, url: str) -> dict[str, Any]:
    """The document at `url`, its ETag checked against its version."""
    got = client.get(url)
    assert got.status_code == 200, got.text
    document: dict[str, Any] = got.json()
    assert got.headers["etag"] == f'"{document["version"]}"'
    return document


def _postgresql(shop: Shop) -> str | None:
    """A psycopg DSN of the shop's database when it is PostgreSQL (None on SQLite, which shows
    no lock waits to wait on)."""
    if not shop.database_url.startswith("postgresql"):
        return None
    return make_url(shop.database_url).set(drivername="postgresql").render_as_string(False)


def _id(url: str) -> int:
    return int(url.rsplit("/", 1)[1])


def _wait_for_updates_on_lock(dsn: str, count: int) -> None:
    """Until `count` UPDATEs of documents wait for a row lock (PostgreSQL's pg_stat_activity)."""
    with psycopg.connect(dsn, autocommit=True) as watch:

        def waiting() -> bool:
            found = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE 'UPDATE %documents_document%'"
            ).fetchone()
            return found is not None and found[0] == count

        wait_for(waiting, timeout=30, what=f"{count} UPDATEs to wait for the row lock")


@contextmanager
def _row_held(shop: Shop, url: str) -> Iterator[None]:
    """On PostgreSQL, the document's row locked (FOR UPDATE, nothing changed) until every
    gunicorn worker's UPDATE waits for it, so they all race from the same version at once;
    on SQLite, nothing."""
    dsn = _postgresql(shop)
    if dsn is None:
        yield
        return
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM documents_document WHERE id = %s FOR UPDATE", (_id(url),))
        yield
        _wait_for_updates_on_lock(dsn, WORKERS)
        holder.rollback()


def test_reads_carry_the_etag_and_answer_304_to_a_matching_if_none_match(served: Served) -> None:
    with served.client("ann") as ann:
        url = _create(ann)
        assert _current(ann, url)["body"] == "first"
        # Weak comparison for If-None-Match: W/"1" matches "1" too.
        for method, tags in (("GET", '"1"'), ("GET", 'W/"7", W/"1"'), ("HEAD", "*")):
            same = ann.request(method, url, headers={"If-None-Match": tags})
            assert same.status_code == 304, (method, tags, same.text)
            assert same.content == b""
            assert same.headers["etag"] == '"1"'
        assert ann.get(url, headers={"If-None-Match": '"2"'}).status_code == 200
        problem_of(ann.get(url, headers={"If-Match": '"2"'}), 412, "precondition-failed")
        listed = ann.get("/documents")
        assert listed.status_code == 200
        assert "etag" not in listed.headers
        # DRF's metadata tries a PUT's get_object on a copy of the request: not a write to refuse.
        options = ann.options(url)
        assert options.status_code == 200, options.text
        assert "title" in options.json()["actions"]["PUT"]


def test_writes_need_a_current_if_match(served: Served) -> None:
    with served.client("ann") as ann:
        url = _create(ann)
        before = _current(ann, url)
        for method, body in WRITES:
            refused = ann.request(method, url, **body)
            assert problem_of(refused, 428, "precondition-required")["header"] == "If-Match"
            malformed = ann.request(method, url, headers={"If-Match": "1"}, **body)
            problem_of(malformed, 400, "precondition-invalid")
        assert _current(ann, url) == before

        patched = ann.patch(url, json={"body": "second"}, headers={"If-Match": '"1"'})
        assert patched.status_code == 200, patched.text
        assert patched.headers["etag"] == '"2"'
        assert patched.json() == {
            **before,
            "body": "second",
            "version": 2,
            "updated_at": patched.json()["updated_at"],
        }
        assert patched.json()["updated_at"] > before["updated_at"]
        assert _current(ann, url) == patched.json()

        # Stale, and weak (If-Match compares strongly, so W/"2" never matches).
        for tag, (method, body) in zip(('"1"', 'W/"2"', '"3"'), WRITES, strict=True):
            stale = ann.request(method, url, headers={"If-Match": tag}, **body)
            assert problem_of(stale, 412, "precondition-failed")["header"] == "If-Match"
        assert _current(ann, url) == patched.json()

        put = ann.put(
            url, json={"title": "Whole", "body": "third"}, headers={"If-Match": '"1", "2"'}
        )
        assert put.status_code == 200, put.text
        assert (put.headers["etag"], put.json()["title"], put.json()["body"]) == (
            '"3"',
            "Whole",
            "third",
        )
        star = ann.patch(url, json={"title": "Any"}, headers={"If-Match": "*"})
        assert star.status_code == 200, star.text
        assert (star.headers["etag"], star.json()["body"]) == ('"4"', "third")

        deleted = ann.delete(url, headers={"If-Match": '"4"'})
        assert deleted.status_code == 204, deleted.text
        assert ann.get(url).status_code == 404
        assert ann.patch(url, json={"body": "x"}, headers={"If-Match": '"5"'}).status_code == 404


def test_concurrent_writers_with_one_etag_get_one_success(shop: Shop, served: Served) -> None:
    """12 PATCHes with the same If-Match: one 200, eleven 412. On PostgreSQL the first four (one
    per worker) are held at the UPDATE together, each having read version 1 and found its
    If-Match true; only the compare-and-set tells them apart."""
    writers = 12
    with served.client("ann") as ann:
        url = _create(ann, body="original")
    start = threading.Barrier(writers)

    def patch(writer: int) -> httpx.Response:
        with served.client("ann") as client:
            start.wait(timeout=10)
            return client.patch(url, json={"body": f"writer {writer}"}, headers={"If-Match": '"1"'})

    with ThreadPoolExecutor(writers) as pool, _row_held(shop, url):
        pending = [pool.submit(patch, writer) for writer in range(writers)]
    answers = [answer.result() for answer in pending]
    won = [writer for writer, answer in enumerate(answers) if answer.status_code == 200]
    assert len(won) == 1, [answer.status_code for answer in answers]
    for writer, answer in enumerate(answers):
        if writer not in won:
            problem_of(answer, 412, "precondition-failed")
    assert answers[won[0]].headers["etag"] == '"2"'
    with served.client("ann") as ann:
        final = _current(ann, url)
    assert (final["version"], final["body"]) == (2, f"writer {won[0]}")


def test_another_user_cannot_see_or_write_the_document(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        url = _create(ann)
        before = _current(ann, url)
        assert bob.get(url).status_code == 404
        # 404, not 428 or 412: nothing says the document exists.
        assert bob.patch(url, json={"body": "bob's"}).status_code == 404
        for method, body in WRITES:
            assert bob.request(method, url, headers={"If-Match": '"1"'}, **body).status_code == 404
        assert bob.get("/documents").json() == []
        assert _current(ann, url) == before


@pytest.mark.parametrize(
    ("if_match", "status", "body", "version"), [('"1"', 412, "other", 2), ("*", 200, "mine", 3)]
)
def test_a_write_committed_between_the_check_and_the_update_is_not_overwritten(
    shop: Shop, served: Served, if_match: str, status: int, body: str, version: int
) -> None:
    """The PATCH reads version 1 and its If-Match holds; another transaction has changed the row
    but not committed, so the PATCH's UPDATE waits for the row lock. Once that commits, the
    UPDATE finds version 2 and changes nothing; evaluated again on version 2, `"1"` is stale
    (412, the other write stays) and `*` still holds (the PATCH is applied to version 2)."""
    dsn = _postgresql(shop)
    if dsn is None:
        pytest.skip("SQLite shows no lock waits to wait on (PostgreSQL's pg_stat_activity does)")
    with served.client("ann") as ann:
        url = _create(ann)
    with psycopg.connect(dsn) as other, served.client("ann") as ann, ThreadPoolExecutor(1) as pool:
        other.execute(
            "UPDATE documents_document SET body = 'other', version = version + 1 WHERE id = %s",
            (_id(url),),
        )
        pending = pool.submit(ann.patch, url, json={"body": "mine"}, headers={"If-Match": if_match})
        _wait_for_updates_on_lock(dsn, 1)
        other.commit()
        answer = pending.result(timeout=30)
        assert answer.status_code == status, answer.text
        final = _current(ann, url)
    assert (final["version"], final["body"]) == (version, body)
    if status == 412:
        problem_of(answer, 412, "precondition-failed")
    else:
        assert answer.json() == final
