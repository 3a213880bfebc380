"""The request path against hand-written code: `ustun serve` beside the apps engineers write.

For each backend (PostgreSQL, SQLite) it starts, on fresh databases, one uvicorn process each:

- hand-written: a careful engineer's FastAPI app (`benchmarks/request_path_apps.py`) that does
  ustun's durable work only (payment and outbox event in one transaction, no idempotency record);
- six-statement: the same app whose POST sends ustun's own statements (lock and read the key,
  insert the payment, its webhook event and the idempotency record with the answer) to ustun's
  own tables, one await each: the ceiling of ustun's SQL shape;
- typical: what most teams ship, FastAPI + SQLAlchemy's async ORM behind an idempotency
  middleware on Redis that is not transactional (`idempotency_header_middleware`);
- ustun: `ustun serve --no-worker` (JSON logs, metrics and every middleware on, as shipped);
- with `--base SRC`, ustun-base: the same from an earlier tree (`PYTHONPATH=SRC`), so a change's
  before and after are loaded in the same rounds;

and loads each with `wrk -t1 -c32`:

- `POST /v1/payments` with a fresh `Idempotency-Key` per request;
- `GET /v1/payments/{id}` of one row, authenticated, 200 with its ETag.

Rounds are interleaved (each server in turn, round after round) so drifting load on the machine
hits all alike; it prints medians, the ratios of ustun to each of the others, and the CPU per
request of the server process and of the PostgreSQL backends of its database.

    .venv/bin/python benchmarks/request_path.py [--rounds 5] [--seconds 5] [--backend both]
        [--base /tmp/base/src]

Needs wrk, PostgreSQL (`USTUN_BENCH_PG`) and Redis (`BENCH_REDIS_URL`, default
redis://127.0.0.1:6379/0; the typical app's keys, under a prefix of the run's, are deleted at
the end). With `--profile DIR`, one more round per workload loads `ustun serve` and the
six-statement app under py-spy (`pip install py-spy`) and prints their CPU per request split by
layer side by side (`benchmarks/budget.py`): where ustun's cost stands above its SQL's ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from redis import Redis

from budget import print_budgets
from idempotency import BODY, WRK_SCRIPT, _free_port, _wait_healthy
from jobs import PG, backend_cpu, cpu_seconds, drop_pg_database, fresh_pg_database
from request_path_apps import REDIS_URL, new_key, prepare_postgresql, prepare_sqlite

ROOT = Path(__file__).resolve().parent.parent
USTUN = str(Path(sys.executable).with_name("ustun"))
SECRET_KEY = "benchmark-secret-key-of-at-least-32-characters"
GET_SCRIPT = """
wrk.headers["Authorization"] = "Bearer %(key)s"
"""
WORKLOADS = ("POST", "GET")
# The servers of each backend, in the order they are loaded in a round; ustun is compared to each.
SERVERS = ("hand-written", "six-statement", "typical", "ustun")
PEERS = {"hand-written": "hand", "six-statement": "six", "typical": "typical"}  # short names
BASE = "ustun-base"  # with `--base`: an earlier tree's ustun, loaded in the same rounds


@dataclass
class Sample:
    """One round of one workload against one server."""

    rate: float
    server_us: float  # CPU µs per request of the server process
    postgresql_us: float  # CPU µs per request of its database's PostgreSQL backends


@dataclass
class Server:
    """One server on a fresh database of its own, until `close()`."""

    name: str  # one of SERVERS
    backend: str  # "postgresql" | "sqlite"
    proc: subprocess.Popen[bytes]
    base: str
    key: str
    database: str | None  # the PostgreSQL database, to find its backends
    log: Path
    payment: str = ""  # the id the GET reads
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {w: [] for w in WORKLOADS})

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _start(
    name: str,
    backend: str,
    command: list[str],
    env: dict[str, str],
    key: str,
    tmp: Path,
    cleanup: ExitStack,
) -> Server:
    port = _free_port()
    log = tmp / f"{name}-{backend}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "--port", str(port)],
            env={**os.environ, **env},
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )
    database = env.get("PG_DATABASE")
    server = Server(name, backend, proc, f"http://127.0.0.1:{port}", key, database, log)
    cleanup.callback(server.close)
    try:
        _wait_healthy(server.base, proc)
    except SystemExit:
        sys.stderr.write(log.read_text())
        raise
    return server


def _fresh_database(cleanup: ExitStack) -> str:
    """A new PostgreSQL database, dropped when `cleanup` closes."""
    name = asyncio.run(fresh_pg_database())
    cleanup.callback(lambda: asyncio.run(drop_pg_database(name)))
    return name


def _uvicorn(
    name: str,
    backend: str,
    factory: str,
    env: dict[str, str],
    key: str,
    tmp: Path,
    cleanup: ExitStack,
) -> Server:
    """`request_path_apps:<factory>` served by uvicorn with `env`."""
    env = {**env, "PYTHONPATH": str(ROOT / "benchmarks")}
    command = [sys.executable, "-m", "uvicorn", f"request_path_apps:{factory}", "--factory"]
    command += ["--log-level", "warning", "--no-access-log"]
    return _start(name, backend, command, env, key, tmp, cleanup)


def _hand_database(
    backend: str, name: str, tmp: Path, cleanup: ExitStack
) -> tuple[dict[str, str], str]:
    """A fresh database with the hand-written apps' schema and a key: its env and the key."""
    key = new_key()
    env = {}
    if backend == "postgresql":
        env["PG_DATABASE"] = _fresh_database(cleanup)
        env["BENCH_DATABASE"] = f"{PG}/{env['PG_DATABASE']}"
        asyncio.run(prepare_postgresql(env["BENCH_DATABASE"], key))
    else:
        env["BENCH_DATABASE"] = str(tmp / f"{name}.db")
        prepare_sqlite(env["BENCH_DATABASE"], key)
    return env, key


def _ustun_database(
    backend: str, name: str, tmp: Path, cleanup: ExitStack, extra: dict[str, str] | None = None
) -> tuple[dict[str, str], str]:
    """A fresh database migrated by `ustun migrate`, with a key from `keys create`: the env of
    `ustun serve` on it (plus `extra`) and the key."""
    # One account sends every request: its token bucket is checked on each (that cost counts),
    # at a rate and burst it never reaches.
    env = {"USTUN_SECRET_KEY": SECRET_KEY, "USTUN_RATE_LIMIT": "1e6", "USTUN_RATE_BURST": "1000000"}
    env.update(extra or {})
    if backend == "postgresql":
        env["PG_DATABASE"] = _fresh_database(cleanup)
        env["USTUN_DATABASE_URL"] = f"{PG}/{env['PG_DATABASE']}"
    else:
        env["USTUN_DATABASE_URL"] = f"sqlite:///{tmp / f'{name}.db'}"
    full = {**os.environ, **env}
    subprocess.run([USTUN, "migrate"], env=full, check=True, capture_output=True)
    key = subprocess.run(
        [USTUN, "keys", "create", "--account", "bench"],
        env=full,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return env, key


def _driver(backend: str) -> str:
    return "asyncpg" if backend == "postgresql" else "aiosqlite"


def hand_written(backend: str, tmp: Path, cleanup: ExitStack) -> Server:
    """The hand-written app on a fresh database."""
    env, key = _hand_database(backend, "hand-written", tmp, cleanup)
    return _uvicorn("hand-written", backend, f"{_driver(backend)}_app", env, key, tmp, cleanup)


def six_statement(backend: str, tmp: Path, cleanup: ExitStack) -> Server:
    """The hand-written app sending ustun's statements, on a fresh database that ustun made."""
    env, key = _ustun_database(backend, "six-statement", tmp, cleanup)
    env["BENCH_DATABASE"] = env["USTUN_DATABASE_URL"].removeprefix("sqlite:///")
    factory = f"{_driver(backend)}_six_app"
    return _uvicorn("six-statement", backend, factory, env, key, tmp, cleanup)


def typical(backend: str, tmp: Path, cleanup: ExitStack) -> Server:
    """The typical stack on a fresh database; its idempotency keys in Redis under a prefix of
    this run's, deleted when `cleanup` closes."""
    env, key = _hand_database(backend, "typical", tmp, cleanup)
    env["BENCH_REDIS_PREFIX"] = f"ustun-request-path-{uuid.uuid4().hex[:8]}:"
    cleanup.callback(_forget_redis, env["BENCH_REDIS_PREFIX"])
    return _uvicorn("typical", backend, "typical_app", env, key, tmp, cleanup)


def _forget_redis(prefix: str) -> None:
    with Redis.from_url(REDIS_URL) as redis:
        for found in redis.scan_iter(match=f"{prefix}*", count=1000):
            redis.delete(found)


def ustun(backend: str, tmp: Path, cleanup: ExitStack, *, source: str | None = None) -> Server:
    """`ustun serve --no-worker` on a fresh database, migrated, with a key from `keys create`;
    with `source`, the ustun of another tree (`PYTHONPATH=source`) as `ustun-base`."""
    name = "ustun" if source is None else BASE
    extra = None if source is None else {"PYTHONPATH": source}
    env, key = _ustun_database(backend, name, tmp, cleanup, extra)
    return _start(name, backend, [USTUN, "serve", "--no-worker"], env, key, tmp, cleanup)


STARTERS = {
    "hand-written": hand_written,
    "six-statement": six_statement,
    "typical": typical,
    "ustun": ustun,
}


def seed(server: Server) -> None:
    """Create the payment the GET workload reads."""
    answer = httpx.post(
        f"{server.base}/v1/payments",
        content=BODY,
        headers={
            "authorization": f"Bearer {server.key}",
            "content-type": "application/json",
            "idempotency-key": uuid.uuid4().hex,
        },
    )
    answer.raise_for_status()
    server.payment = answer.json()["id"]


def _wrk_command(
    server: Server, workload: str, seconds: int, connections: int, tmp: Path
) -> list[str]:
    script = tmp / f"{workload}-{server.name}-{server.backend}.lua"
    template = WRK_SCRIPT if workload == "POST" else GET_SCRIPT
    script.write_text(template % {"body": BODY, "key": server.key})
    path = "/v1/payments" if workload == "POST" else f"/v1/payments/{server.payment}"
    return [
        *("wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script)),
        *(f"{server.base}{path}", "--", uuid.uuid4().hex),
    ]


def wrk(server: Server, workload: str, seconds: int, connections: int, tmp: Path) -> Sample:
    """One wrk run; requests/s and the CPU per request it cost the server and PostgreSQL."""
    command = _wrk_command(server, workload, seconds, connections, tmp)
    backends = asyncio.run(backend_cpu(server.database))
    cpu = cpu_seconds(server.proc.pid)
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(server.proc.pid) - cpu
    postgresql = sum(
        seconds - backends.get(pid, 0.0)
        for pid, seconds in asyncio.run(backend_cpu(server.database)).items()
    )
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad:
        raise SystemExit(f"{server.name} {server.backend} {workload}: {bad.group(1)} failed\n{out}")
    requests = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert requests is not None, out
    assert rate is not None, out
    count = int(requests.group(1))
    return Sample(float(rate.group(1)), cpu / count * 1e6, postgresql / count * 1e6)


def profile(server: Server, workload: str, args: argparse.Namespace, tmp: Path) -> Path:
    """Load `server` once more while py-spy samples it; the raw profile's path."""
    out = Path(args.profile) / f"{workload.lower()}-{server.backend}-{server.name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = _wrk_command(server, workload, args.seconds + 2, args.connections, tmp)
    with subprocess.Popen(command, stdout=subprocess.DEVNULL) as load:
        time.sleep(1)  # sample the steady state, not the connection set-up
        subprocess.run(
            [
                *(str(Path(sys.executable).with_name("py-spy")), "record", "--nonblocking"),
                *("--pid", str(server.proc.pid), "--duration", str(args.seconds)),
                *("--rate", "200", "--format", "raw", "--output", str(out)),
            ],
            check=True,
            capture_output=True,
        )
    if load.returncode != 0:
        raise SystemExit(f"wrk failed while profiling {server.backend} {workload}")
    return out


def profiles(group: dict[str, Server], workload: str, args: argparse.Namespace, tmp: Path) -> None:
    """ustun's CPU per request by layer beside the six-statement app's (its SQL's ceiling)."""
    found = [
        (name, profile(group[name], workload, args, tmp), _median(group[name].samples[workload]))
        for name in ("six-statement", "ustun")
    ]
    print(f"\n{workload} {group['ustun'].backend}, server CPU per request by layer:\n")
    print_budgets([(name, path, sample.server_us) for name, path, sample in found])


def _median(samples: list[Sample]) -> Sample:
    return Sample(
        statistics.median(s.rate for s in samples),
        statistics.median(s.server_us for s in samples),
        statistics.median(s.postgresql_us for s in samples),
    )


def report(
    groups: list[dict[str, Server]],
    args: argparse.Namespace,
    servers: list[str],
    peers: dict[str, str],
) -> None:
    print(
        f"\nwrk -t1 -c{args.connections}, {args.rounds} interleaved rounds of {args.seconds:g} s,"
        f" medians; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" {platform.python_implementation()} {platform.python_version()};"
        f" {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f})\n"
    )
    names = " / ".join(peers.get(name, name) for name in servers)
    rates = " | ".join(f"{name} req/s" for name in servers)
    ratios = " | ".join(f"**ustun / {short}**" for short in peers.values())
    print(
        f"| request | backend | {rates} | {ratios} "
        f"| server CPU µs/req {names} | PostgreSQL CPU µs/req {names} |"
    )
    print("|---|---|" + "---:|" * (len(servers) + len(peers) + 2))
    for workload in WORKLOADS:
        for group in groups:
            medians = {name: _median(server.samples[workload]) for name, server in group.items()}
            ours = medians["ustun"]
            backend = group["ustun"].backend
            cells = [f"{medians[name].rate:,.0f}" for name in servers]
            cells += [f"**{ours.rate / medians[name].rate:.2f}**" for name in peers]
            cells.append(" / ".join(f"{medians[name].server_us:.0f}" for name in servers))
            postgresql = " / ".join(f"{medians[name].postgresql_us:.0f}" for name in servers)
            cells.append(postgresql if backend == "postgresql" else "-")
            print(f"| {workload} | {backend} | " + " | ".join(cells) + " |")
    print("\nrounds (req/s):")
    for workload in WORKLOADS:
        for group in groups:
            for server in group.values():
                rates = " ".join(f"{s.rate:.0f}" for s in server.samples[workload])
                print(f"  {workload:<4} {server.backend:<10} {server.name:<13} {rates}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5, help="per round, server, request")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--profile", metavar="DIR", help="py-spy ustun and the six-statement app")
    parser.add_argument(
        "--base",
        metavar="SRC",
        help="also load an earlier ustun in the same rounds: `ustun serve` with PYTHONPATH=SRC "
        "(the src/ of a worktree: git worktree add /tmp/base <rev>)",
    )
    args = parser.parse_args()
    servers, peers = list(SERVERS), dict(PEERS)
    starters = dict(STARTERS)
    if args.base:
        starters[BASE] = functools.partial(ustun, source=str(Path(args.base).resolve()))
        servers.insert(servers.index("ustun"), BASE)
        peers[BASE] = "base"
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk as the load generator: apt-get install wrk")
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    groups: list[dict[str, Server]] = []  # per backend, its servers by name
    # Closing `cleanup` stops every server, then drops its database (last in, first out).
    with tempfile.TemporaryDirectory(prefix="ustun-request-path-") as name, ExitStack() as cleanup:
        tmp = Path(name)
        for backend in backends:
            groups.append({name: starters[name](backend, tmp, cleanup) for name in servers})
        for group in groups:
            for server in group.values():
                seed(server)
                for workload in WORKLOADS:  # warm-up, not counted
                    wrk(server, workload, 1, args.connections, tmp)
        for round_ in range(args.rounds):
            for workload in WORKLOADS:
                for group in groups:
                    for server in group.values():
                        sample = wrk(server, workload, args.seconds, args.connections, tmp)
                        server.samples[workload].append(sample)
                        print(
                            f"  round {round_ + 1} {workload} {server.backend}"
                            f" {server.name}: {sample.rate:.0f}/s",
                            file=sys.stderr,
                            flush=True,
                        )
        report(groups, args, servers, peers)
        if args.profile:
            print()
            for workload in WORKLOADS:
                for group in groups:
                    profiles(group, workload, args, tmp)


if __name__ == "__main__":
    main()
