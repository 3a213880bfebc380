"""Optimistic concurrency against a real `ustun serve`, on SQLite and PostgreSQL.

Many real concurrent HTTP requests: one ETag admits exactly one write, and read-modify-write
loops that retry on 412 lose no update.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator

import httpx
import pytest

from support import BACKENDS, Server, drop_pg_database, make_pg_database, wait_for

pytestmark = pytest.mark.e2e
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")
WRITERS = 8
INCREMENTS = 10
RACERS = 20


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A real server on an empty database of each backend: its base URL and first API key."""
    tmp = tmp_path_factory.mktemp(f"conc-{request.param}")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp / 'ustun.db'}"
    else:
        pg_name, url = make_pg_database()
    server = Server(url, tmp / "serve.log", "--no-worker").start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        yield server.base_url, key
    finally:
        server.stop()
        if pg_name is not None:
            drop_pg_database(pg_name)


def _client(served: tuple[str, str]) -> httpx.AsyncClient:
    base, key = served
    return httpx.AsyncClient(
        base_url=base,
        headers={"authorization": f"Bearer {key}"},
        limits=httpx.Limits(max_connections=RACERS),
        timeout=30,
    )


async def _new_document(http: httpx.AsyncClient, body: str = "0") -> httpx.Response:
    url = f"/v1/documents/e2e-{uuid.uuid4().hex}"
    made = await http.put(
        url, json={"title": "counter", "body": body}, headers={"if-none-match": "*"}
    )
    assert made.status_code == 201, made.text
    return made


async def test_twenty_puts_with_one_etag_one_wins(served: tuple[str, str]) -> None:
    async with _client(served) as http:
        made = await _new_document(http)
        url, tag = made.headers["location"], made.headers["etag"]
        answers = await asyncio.gather(
            *(
                http.put(url, json={"title": f"w{n}", "body": str(n)}, headers={"if-match": tag})
                for n in range(RACERS)
            )
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200] + [412] * (RACERS - 1)
        winner = next(a for a in answers if a.status_code == 200)
        final = await http.get(url)
        assert final.json() == winner.json()
        assert final.json()["version"] == 2
        assert final.headers["etag"] == winner.headers["etag"]
        for lost in (a for a in answers if a.status_code == 412):
            assert lost.json()["type"].endswith("/problems/precondition-failed")


async def test_read_modify_write_with_if_match_loses_no_update(served: tuple[str, str]) -> None:
    async with _client(served) as http:
        url = (await _new_document(http)).headers["location"]
        conflicts = 0

        async def writer() -> None:
            nonlocal conflicts
            for _ in range(INCREMENTS):
                while True:
                    got = await http.get(url)
                    value = int(got.json()["body"])
                    put = await http.put(
                        url,
                        json={"title": "counter", "body": str(value + 1)},
                        headers={"if-match": got.headers["etag"]},
                    )
                    if put.status_code == 200:
                        break
                    assert put.status_code == 412, put.text
                    conflicts += 1

        await asyncio.gather(*(writer() for _ in range(WRITERS)))
        final = (await http.get(url)).json()
        assert final["body"] == str(WRITERS * INCREMENTS)
        assert final["version"] == WRITERS * INCREMENTS + 1
        assert conflicts > 0, "the writers never contended, so this proved nothing"


async def test_the_same_writes_without_if_match_are_refused(served: tuple[str, str]) -> None:
    async with _client(served) as http:
        url = (await _new_document(http)).headers["location"]

        async def writer() -> list[int]:
            statuses = []
            for _ in range(INCREMENTS):
                value = int((await http.get(url)).json()["body"])
                put = await http.put(url, json={"title": "counter", "body": str(value + 1)})
                statuses.append(put.status_code)
            return statuses

        results = await asyncio.gather(*(writer() for _ in range(WRITERS)))
        assert {status for statuses in results for status in statuses} == {428}
        final = (await http.get(url)).json()
        assert (final["body"], final["version"]) == ("0", 1)


async def test_precondition_rules_over_the_wire(served: tuple[str, str]) -> None:
    async with _client(served) as http:
        missing = f"/v1/documents/missing-{uuid.uuid4().hex}"
        star = await http.put(missing, json={"title": "x"}, headers={"if-match": "*"})
        assert star.status_code == 412
        assert (await http.get(missing)).status_code == 404

        made = await _new_document(http)
        url, tag = made.headers["location"], made.headers["etag"]
        weak = await http.put(url, json={"title": "x"}, headers={"if-match": f"W/{tag}"})
        assert weak.status_code == 412
        cached = await http.get(url, headers={"if-none-match": f"W/{tag}"})
        assert cached.status_code == 304
        assert cached.headers["etag"] == tag
        head = await http.head(url, headers={"if-none-match": tag})
        assert head.status_code == 304
        full_head = await http.head(url)
        assert full_head.status_code == 200
        assert full_head.content == b""
        listed = await http.put(
            url, json={"title": "listed"}, headers={"if-match": f'"1.0000000000000000", {tag}'}
        )
        assert listed.status_code == 200
        assert listed.headers["etag"] != tag
