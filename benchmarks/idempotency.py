"""Requests/s of `POST /v1/payments` with a fresh Idempotency-Key each, per idempotency layer.

Each variant is the same service endpoint in its own uvicorn process (one worker, no access
log) on a fresh database, loaded in turn by `wrk` (a separate process) at a fixed concurrency,
round-robin over several rounds; the median is reported. Ratios are to the same endpoint with
no idempotency layer, measured in the same run.

    .venv/bin/python benchmarks/idempotency.py [--rounds 4] [--seconds 3] [--connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
from redis import Redis

from ustun.service.plumbing.accounts import create_key
from ustun.store import Database
from ustun.store.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
PG_SERVER = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
BODY = '{"amount":1250,"currency":"EUR","order_id":7,"description":"benchmark"}'
# Each wrk thread numbers its requests; the thread id and a run id keep keys unique.
WRK_SCRIPT = """
local counter = 0
local ids = 0
local headers = {}
thread_id = 0
function setup(thread)
  ids = ids + 1
  thread:set("thread_id", ids)
end
wrk.method = "POST"
wrk.body = [[%(body)s]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"
function init(args)
  run = args[1]
  for name, value in pairs(wrk.headers) do headers[name] = value end
end
function request()
  counter = counter + 1
  headers["Idempotency-Key"] = run .. "-" .. thread_id .. "-" .. counter
  return wrk.format(nil, nil, headers)
end
"""


@dataclass(frozen=True)
class Variant:
    key: str
    layer: str  # BENCH_VARIANT for benchmarks/idempotency_apps.py
    backend: str  # sqlite | postgresql
    label: str


VARIANTS = [
    Variant("off", "off", "sqlite", "no idempotency (baseline)"),
    Variant("sqlite", "ustun", "sqlite", "ustun, SQLite (transactional)"),
    Variant("sqlite-claim-first", "ustun-claim-first", "sqlite", "ustun, SQLite, claim first"),
    Variant("postgresql", "ustun", "postgresql", "ustun, PostgreSQL (transactional)"),
    Variant("redis", "ustun-redis", "sqlite", "ustun, Redis store (plain)"),
    Variant("peer-memory", "peer-memory", "sqlite", "asgi-idempotency-header, memory"),
    Variant("peer-redis", "peer-redis", "sqlite", "asgi-idempotency-header, Redis"),
]


async def _pg(sql: str) -> None:
    conn = await asyncpg.connect(PG_SERVER)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _prepare(url: str) -> str:
    db = Database(url)
    try:
        await upgrade(db)
        return await create_key(db, "bench")
    finally:
        await db.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited early with {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not answer /healthz in 30 s")


def _wrk(base: str, script: Path, seconds: int, connections: int, run: str) -> tuple[float, str]:
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "-s",
            str(script),
            f"{base}/v1/payments",
            "--",
            run,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad:
        raise SystemExit(f"{bad.group(1)} requests failed:\n{out}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert rate, out
    return float(rate.group(1)), out


class Running:
    """One variant's server, on a fresh database of its own, until `close()`."""

    def __init__(self, variant: Variant, tmp: Path) -> None:
        self.variant = variant
        self.pg_name: str | None = None
        if variant.backend == "sqlite":
            url = f"sqlite:///{tmp / (uuid.uuid4().hex + '.db')}"
        else:
            self.pg_name = f"ustun_bench_{uuid.uuid4().hex[:10]}"
            asyncio.run(_pg(f'CREATE DATABASE "{self.pg_name}"'))
            url = f"{PG_SERVER.rsplit('/', 1)[0]}/{self.pg_name}"
        key = asyncio.run(_prepare(url))
        self.script = tmp / f"{uuid.uuid4().hex}.lua"
        self.script.write_text(WRK_SCRIPT % {"body": BODY, "key": key})
        port = _free_port()
        self.redis_prefix = f"ustun-bench:{uuid.uuid4().hex}:"
        env = {
            **os.environ,
            "USTUN_DATABASE_URL": url,
            # PostgreSQL refuses to start without the key that encrypts webhook secrets.
            "USTUN_SECRET_KEY": "benchmark-secret-key-of-at-least-32-characters",
            "BENCH_VARIANT": variant.layer,
            "BENCH_REDIS_PREFIX": self.redis_prefix,
            "PYTHONPATH": str(ROOT),
        }
        server = [sys.executable, "-m", "uvicorn", "benchmarks.idempotency_apps:app", "--factory"]
        self.proc = subprocess.Popen(
            [*server, "--port", str(port), "--log-level", "warning", "--no-access-log"],
            env=env,
            cwd=ROOT,
        )
        self.base = f"http://127.0.0.1:{port}"
        self.rates: list[float] = []

    def load(self, seconds: int, connections: int) -> float:
        rate, _ = _wrk(self.base, self.script, seconds, connections, uuid.uuid4().hex)
        self.rates.append(rate)
        return rate

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
        if self.pg_name is not None:
            asyncio.run(_pg(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)'))
        redis = Redis.from_url(REDIS_URL)
        keys = list(redis.scan_iter(match=f"{self.redis_prefix}*"))
        for start in range(0, len(keys), 500):
            redis.delete(*keys[start : start + 500])
        redis.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3, help="per round and variant")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--only", nargs="*", choices=[v.key for v in VARIANTS], help="a subset (baseline first)"
    )
    args = parser.parse_args()
    chosen = [v for v in VARIANTS if not args.only or v.key in args.only or v.key == "off"]
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk as the load generator: apt-get install wrk")
    with tempfile.TemporaryDirectory() as tmp:
        servers = [Running(v, Path(tmp)) for v in chosen]
        try:
            for server in servers:
                _wait_healthy(server.base, server.proc)
                server.load(1, args.connections)  # warm-up, not counted
                server.rates.clear()
            # Round-robin, so that drifting load from other users of the machine hits every
            # variant alike; each idle server costs nothing while another one is measured.
            for round_ in range(args.rounds):
                for server in servers:
                    rate = server.load(args.seconds, args.connections)
                    print(f"  round {round_ + 1} {server.variant.key}: {rate:.0f}", file=sys.stderr)
        finally:
            for server in servers:
                server.close()
    results = [(s.variant, statistics.median(s.rates), s.rates) for s in servers]
    baseline = results[0][1]
    peer_redis = next((rate for v, rate, _ in results if v.key == "peer-redis"), float("nan"))
    print(
        f"\nPOST /v1/payments, a fresh key per request; wrk -t1 -c{args.connections}, "
        f"{args.rounds} interleaved rounds of {args.seconds} s, median; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{platform.python_implementation()} {platform.python_version()}; "
        f"{os.cpu_count()} cores, shared (load average {os.getloadavg()[0]:.1f})\n"
    )
    print("| variant | req/s (median) | rounds | vs baseline | vs peer Redis |")
    print("|---|---:|---|---:|---:|")
    for variant, rate, rates in results:
        spread = " ".join(f"{r:.0f}" for r in rates)
        print(
            f"| {variant.label} | {rate:.0f} | {spread} | {rate / baseline:.2f} "
            f"| {rate / peer_redis:.2f} |"
        )


if __name__ == "__main__":
    main()
