"""Optimistic concurrency against a real `ustun serve`, on SQLite and PostgreSQL.

Many real concurrent HTTP requests: one ETag admits exactly one write, on every resource that
takes `If-Match`, and read-modify-write loops that retry on 412 lose no update.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from support import Server, wait_for

pytestmark = pytest.mark.e2e
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")
WRITERS = 8
INCREMENTS = 10
RACERS = 20
ROUNDS = 3


@pytest.fixture(scope="module")
def served(
    module_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A real server on the module's database: its base URL and first API key."""
    server = Server(
        module_database,
        tmp_path_factory.mktemp("serve") / "serve.log",
        "--no-worker",
        USTUN_RATE_LIMIT="0",  # one account's racing writers send past its request rate
    )
    server.start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        yield server.base_url, key
    finally:
        server.stop()


@pytest.fixture(scope="module")
def twin(
    module_database: str, served: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A second server process on the same database, as in a scale-out: base URL and key."""
    server = Server(
        module_database,
        tmp_path_factory.mktemp("twin") / "serve.log",
        "--no-worker",
        USTUN_RATE_LIMIT="0",
    )
    server.start()
    try:
        yield server.base_url, served[1]
    finally:
        server.stop()


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


async def _new_payment(http: httpx.AsyncClient) -> httpx.Response:
    made = await http.post(
        "/v1/payments",
        json={"amount": 100, "currency": "EUR"},
        headers={"idempotency-key": uuid.uuid4().hex},
    )
    assert made.status_code == 201, made.text
    return made


async def _new_endpoint(http: httpx.AsyncClient) -> httpx.Response:
    made = await http.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/e2e"})
    assert made.status_code == 201, made.text
    return made


@dataclass(frozen=True)
class Write:
    """One kind of conditional write: how to make the resource, and the n-th racer's request."""

    make: Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]
    method: str
    body: Callable[[int], dict[str, Any] | None]
    content_type: str = "application/json"

    @property
    def deletes(self) -> bool:
        return self.method == "DELETE"


_STATUSES = ("succeeded", "failed", "cancelled")
WRITES = {
    "payment-patch": Write(_new_payment, "PATCH", lambda n: {"status": _STATUSES[n % 3]}),
    "document-put": Write(_new_document, "PUT", lambda n: {"title": f"w{n}", "body": str(n)}),
    "document-patch": Write(
        _new_document, "PATCH", lambda n: {"body": str(n)}, "application/merge-patch+json"
    ),
    "document-delete": Write(_new_document, "DELETE", lambda n: None),
    # Even racers change the description, odd ones disable: both kinds of endpoint PATCH.
    "endpoint-patch": Write(
        _new_endpoint,
        "PATCH",
        lambda n: {"description": f"w{n}"} if n % 2 == 0 else {"enabled": False},
    ),
    "endpoint-delete": Write(_new_endpoint, "DELETE", lambda n: None),
}


async def _race(write: Write, clients: list[httpx.AsyncClient]) -> None:
    made = await write.make(clients[0])
    url, tag = made.headers["location"], made.headers["etag"]
    # Open every connection first, so that the writes arrive together rather than one by one.
    await asyncio.gather(*(clients[n % len(clients)].get(url) for n in range(RACERS)))

    def attempt(n: int) -> Awaitable[httpx.Response]:
        http, body = clients[n % len(clients)], write.body(n)
        if body is None:
            return http.request(write.method, url, headers={"if-match": tag})
        headers = {"if-match": tag, "content-type": write.content_type}
        return http.request(write.method, url, json=body, headers=headers)

    answers = await asyncio.gather(*(attempt(n) for n in range(RACERS)))
    won = [a for a in answers if a.is_success]
    assert len(won) == 1, sorted(a.status_code for a in answers)
    lost = [a for a in answers if not a.is_success]
    # RFC 9110 §13.2.1: once the winner has deleted it, a missing resource is a 404.
    refusals = {412, 404} if write.deletes else {412}
    assert {a.status_code for a in lost} <= refusals, [a.text for a in lost]
    for refused in lost:
        assert refused.headers["content-type"] == "application/problem+json"
    final = await clients[0].get(url)
    if write.deletes:
        assert final.status_code == 404
        return
    assert final.json() == won[0].json()
    assert final.headers["etag"] == won[0].headers["etag"] != tag


@pytest.mark.parametrize("kind", WRITES)
async def test_one_etag_admits_one_write_on_every_resource(
    served: tuple[str, str], twin: tuple[str, str], kind: str
) -> None:
    """Racers spread over two server processes on one database, several rounds."""
    async with _client(served) as first, _client(twin) as second:
        for _ in range(ROUNDS):
            await _race(WRITES[kind], [first, second])


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
