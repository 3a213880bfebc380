"""CPU per request of two versions of ustun, A/B in process: what one change to the path saves.

Each arm is the `src` folder of a checkout (e.g. `git archive main src | tar -x -C /tmp/a`).
Per round, each arm runs in a fresh process (`PYTHONPATH=<src>`) that drives the ASGI app
directly, with no HTTP client: `--concurrency` callers, `--requests` requests after a warm-up,
JSON access log on (to /dev/null) and metrics on. It prints `time.process_time` per request,
so aiosqlite's threads and FastAPI's threadpool count too. Arms alternate A, B, A, B… so drift
in the machine's load hits both alike; the medians are printed last.

    .venv/bin/python benchmarks/request_cpu.py /tmp/a/src src --backend sqlite --workload GET
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from jobs import PG, drop_pg_database, fresh_pg_database

BODY = b'{"amount":1250,"currency":"EUR","order_id":7,"description":"benchmark"}'
WARMUP = 64


async def _call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]]) -> Any:
    """One request straight into the ASGI app; returns (status, body)."""
    body = BODY if method == "POST" else b""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent = False
    answer: dict[str, Any] = {"body": b""}

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        else:
            answer["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return answer["status"], answer["body"]


async def _child(url: str, workload: str, requests: int, concurrency: int) -> None:
    """Runs in the arm's process: prints CPU µs per request."""
    from ustun.service import create_app
    from ustun.service.plumbing.accounts import create_key
    from ustun.settings import Settings
    from ustun.store import Database

    db = Database(url)
    key = await create_key(db, f"cpu-{uuid.uuid4().hex[:8]}")
    app = create_app(Settings(database_url=url), db=db)
    auth = (b"authorization", f"Bearer {key}".encode())

    def post_headers() -> list[tuple[bytes, bytes]]:
        return [
            auth,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
            (b"idempotency-key", uuid.uuid4().hex.encode()),
        ]

    async def post() -> int:
        status: int = (await _call(app, "POST", "/v1/payments", post_headers()))[0]
        return status

    async with app.router.lifespan_context(app):
        _, created = await _call(app, "POST", "/v1/payments", post_headers())
        path = f"/v1/payments/{json.loads(created)['id']}"

        async def get() -> int:
            status: int = (await _call(app, "GET", path, [auth]))[0]
            return status

        request: Callable[[], Awaitable[int]] = post if workload == "POST" else get

        async def caller(count: int) -> None:
            for _ in range(count):
                status = await request()
                if status not in (200, 201):
                    raise SystemExit(f"{workload} answered {status}")

        await asyncio.gather(*(caller(WARMUP // concurrency) for _ in range(concurrency)))
        each = requests // concurrency
        started = time.process_time()
        await asyncio.gather(*(caller(each) for _ in range(concurrency)))
        used = time.process_time() - started
    await db.dispose()
    print(f"{used / (each * concurrency) * 1e6:.0f}")


async def _fresh_database(backend: str, folder: str) -> tuple[str, str | None]:
    """A migrated database for both arms: its URL and, on PostgreSQL, its name."""
    from ustun.store import Database
    from ustun.store.migrate import upgrade

    name = await fresh_pg_database() if backend == "postgresql" else None
    url = f"{PG}/{name}" if name else f"sqlite:///{folder}/cpu.db"
    db = Database(url)
    await upgrade(db)
    await db.dispose()
    return url, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", help="src folder of arm A")
    parser.add_argument("b", help="src folder of arm B")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--workload", choices=("GET", "POST"), default="GET")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--child-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("USTUN_SECRET_KEY", "benchmark-secret-key-of-at-least-32-characters")
    if args.child_url:
        from ustun import logs

        with open(os.devnull, "w") as devnull:
            logs.configure("info", devnull)
            asyncio.run(_child(args.child_url, args.workload, args.requests, args.concurrency))
        return
    folder = tempfile.mkdtemp()
    url, name = asyncio.run(_fresh_database(args.backend, folder))
    figures: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for _ in range(args.rounds):
            for arm, src in (("A", args.a), ("B", args.b)):
                env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
                command = [sys.executable, __file__, src, src, "--child-url", url]
                command += ["--workload", args.workload, "--requests", str(args.requests)]
                command += ["--concurrency", str(args.concurrency)]
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                figures[arm].append(float(out.stdout.split()[-1]))
                print(f"  {arm}: {figures[arm][-1]:,.0f} µs", flush=True)
    finally:
        if name:
            asyncio.run(drop_pg_database(name))
    a, b = statistics.median(figures["A"]), statistics.median(figures["B"])
    print(
        f"{args.workload} {args.backend}, CPU µs per request, medians of {args.rounds} rounds:"
        f" A {a:,.0f}, B {b:,.0f} ({(b / a - 1) * 100:+.0f} %)"
    )


if __name__ == "__main__":
    main()
