"""Each account's request rate against a real `ustun serve`, both backends (issue 27): a burst
of concurrent requests passes up to the limit, the rest get 429 `rate-limited` with
`Retry-After` and the RateLimit fields, and another account is not held back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import Server, problem_of
from ustun.service.plumbing.accounts import create_key
from ustun.store import Database

pytestmark = pytest.mark.e2e
BURST = 5


@pytest.fixture(scope="module")
def server(module_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server that gives each account a burst of five requests and one more a minute."""
    log = tmp_path_factory.mktemp("rate") / "serve.log"
    started = Server(
        module_database,
        Path(log),
        "--no-worker",
        USTUN_RATE_LIMIT=str(1 / 60),
        USTUN_RATE_BURST=str(BURST),
    ).start()
    try:
        yield started.base_url
    finally:
        started.stop()


async def _key(database_url: str) -> str:
    db = Database(database_url)
    try:
        return await create_key(db, f"rate-{uuid.uuid4().hex[:12]}")
    finally:
        await db.dispose()


async def test_a_burst_past_the_limit_gets_429_and_another_account_does_not(
    server: str, module_database: str
) -> None:
    flooder, neighbour = await _key(module_database), await _key(module_database)
    async with httpx.AsyncClient(base_url=server, timeout=30) as http:
        answers = await asyncio.gather(
            *(
                http.get("/v1/payments", headers={"authorization": f"Bearer {flooder}"})
                for _ in range(3 * BURST)
            )
        )
        calm = await http.get("/v1/payments", headers={"authorization": f"Bearer {neighbour}"})
    passed = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert len(passed) == BURST
    fields = sorted(a.headers["ratelimit"].split(";") for a in passed)
    assert [(name, r) for name, r, _ in fields] == [('"default"', f"r={n}") for n in range(BURST)]
    assert all(1 <= int(t.removeprefix("t=")) <= 60 for _, _, t in fields)
    for answer in refused:
        problem_of(answer, 429, "rate-limited")
        assert 1 <= int(answer.headers["retry-after"]) <= 60
        assert answer.headers["ratelimit"].startswith('"default";r=0;t=')
        assert answer.headers["ratelimit-policy"] == '"default";q=5;w=300'
    assert calm.status_code == 200
    assert calm.headers["ratelimit"].startswith(f'"default";r={BURST - 1};t=')
