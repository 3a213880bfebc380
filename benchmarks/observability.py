"""What observing a request costs: its metrics and its access-log line.

Drives the ASGI app directly (no network, no HTTP client) so that cost is not drowned in
transport noise: the same in-process app with the plumbing's observation
(`Plumbing._observe`) skipped, with it but the access log off, and with both, in alternating rounds,
on `GET /healthz` (no auth, no database) and an authenticated `GET /v1/payments` (SQLite).
Access logs are formatted as JSON to /dev/null, so their cost is counted.

    .venv/bin/python benchmarks/observability.py --rounds 5 --requests 3000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time
from typing import Any

from starlette.types import ASGIApp, Message

from ustun import logs
from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.service.plumbing.pipeline import Plumbing
from ustun.settings import Settings
from ustun.store import Database
from ustun.store.migrate import upgrade


class _Unobserved(Plumbing):
    """The plumbing without its observation: no metrics, no access-log line."""

    def _observe(self, scope: Any, span: Any, status: int, seconds: float) -> None:
        return None


def _scope(path: str, key: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"bench"), (b"authorization", f"Bearer {key}".encode())],
        "client": ("127.0.0.1", 1),
        "server": ("bench", 80),
    }


async def _call(app: ASGIApp, path: str, key: str) -> int:
    status = 0

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(_scope(path, key), receive, send)
    return status


async def _rate(app: ASGIApp, path: str, key: str, requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        assert await _call(app, path, key) == 200
    return requests / (time.perf_counter() - started)


async def main(rounds: int, requests: int) -> None:
    folder = tempfile.mkdtemp()
    url = f"sqlite:///{folder}/bench.db"
    db = Database(url)
    await upgrade(db)
    key = await create_key(db, "bench")
    observed = create_app(Settings(database_url=url), db=db)
    bare = create_app(Settings(database_url=url), db=db)
    (plumbing,) = [m for m in bare.user_middleware if m.cls is Plumbing]
    plumbing.cls = _Unobserved
    access = logging.getLogger("ustun.access")
    variants = (
        ("without", bare, logging.INFO),
        ("metrics", observed, logging.WARNING),
        ("metrics+log", observed, logging.INFO),
    )
    rates: dict[tuple[str, str], list[float]] = {}
    async with observed.router.lifespan_context(observed), bare.router.lifespan_context(bare):
        for _ in range(rounds):
            for path in ("/healthz", "/v1/payments"):
                for name, app, level in variants:
                    access.setLevel(level)
                    rate = await _rate(app, path, key, requests)
                    rates.setdefault((path, name), []).append(rate)
    await db.dispose()
    print(f"{rounds} rounds x {requests} requests, medians (req/s; ratio to without):")
    for path in ("/healthz", "/v1/payments"):
        without = statistics.median(rates[(path, "without")])
        line = f"  GET {path:13} without {without:8,.0f}"
        for name, _, _ in variants[1:]:
            rate = statistics.median(rates[(path, name)])
            cost = 1e6 / rate - 1e6 / without
            line += f"   {name} {rate:8,.0f} ({rate / without:.2f}x, {cost:+.0f} us)"
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    with open(os.devnull, "w") as nowhere:
        logs.configure("info", nowhere)
        asyncio.run(main(args.rounds, args.requests))
