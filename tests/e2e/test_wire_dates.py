"""`Date` on the wire of a real `ustun serve`: one per answer, never before the `Last-Modified` of
what the request wrote (RFC 9110 §8.8.2.1). uvicorn's own `Date`, refreshed once a second, was
up to a second old: a 201 said it was modified after it was sent."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from support import FIRST_KEY, Server, wait_for
from ustun.http.dates import parse_http_date

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """`ustun serve` on SQLite (the date is the server's, whatever the database), and its key."""
    tmp = tmp_path_factory.mktemp("dates")
    running = Server(
        f"sqlite:///{tmp / 'ustun.db'}",
        tmp / "serve.log",
        USTUN_MAX_HEADERS="20",
        USTUN_RATE_LIMIT="0",  # it writes as fast as it can across second boundaries
    )
    running.start()
    try:
        key = wait_for(lambda: FIRST_KEY.search(running.output()), what="the first API key")
        yield running, key.group()
    finally:
        running.stop()


def test_every_201_across_second_boundaries_is_dated_after_its_change(
    server: tuple[Server, str],
) -> None:
    running, key = server
    headers = {"authorization": f"Bearer {key}"}
    dates: set[str] = set()
    started = time.monotonic()
    with httpx.Client(base_url=running.base_url, headers=headers, timeout=10) as http:
        # Until three seconds have begun: each start is where uvicorn's Date used to lag.
        while len(dates) < 3 or time.monotonic() - started < 1:
            created = http.post(
                "/v1/payments",
                json={"amount": 1, "currency": "EUR"},
                headers={"idempotency-key": str(uuid.uuid4())},
            )
            assert created.status_code == 201, created.text
            sent = created.headers.get_list("date")
            assert len(sent) == 1, sent
            dates.add(sent[0])
            modified = parse_http_date(created.headers["last-modified"])
            date = parse_http_date(sent[0])
            assert modified is not None
            assert date is not None
            assert modified <= date, (created.headers["last-modified"], sent[0])


def test_the_servers_own_answers_keep_their_date(server: tuple[Server, str]) -> None:
    running, _ = server
    flood = {f"x-filler-{n}": "1" for n in range(30)}
    refused = httpx.get(f"{running.base_url}/healthz", headers=flood, timeout=10)
    assert refused.status_code == 431
    assert len(refused.headers.get_list("date")) == 1
    assert len(httpx.get(f"{running.base_url}/healthz").headers.get_list("date")) == 1
