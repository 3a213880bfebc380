"""The request path against hand-written code: `ustun serve` beside a careful engineer's app.

For each backend (PostgreSQL, SQLite) it starts, on fresh databases, `ustun serve --no-worker`
(JSON logs, metrics and every middleware on, as shipped) and the hand-written FastAPI app of
`benchmarks/request_path_apps.py`, one uvicorn process each, and loads them with `wrk -t1 -c32`:

- `POST /v1/payments` with a fresh `Idempotency-Key` per request (the hand-written app ignores
  it: it does the durable work only, no idempotency record);
- `GET /v1/payments/{id}` of one row, authenticated, 200 with its ETag.

Rounds are interleaved (hand-written, ustun, hand-written, ustun…) so drifting load on the
machine hits both alike; it prints medians, the ratios ustun / hand-written, and the CPU per
request of the server process and of the PostgreSQL backends of its database.

    .venv/bin/python benchmarks/request_path.py [--rounds 5] [--seconds 5] [--backend both]

With `--profile DIR`, one more round per workload loads each `ustun serve` under py-spy
(`pip install py-spy`) and prints its CPU per request split by layer (`benchmarks/budget.py`).
"""

from __future__ import annotations

import argparse
import asyncio
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

from budget import print_budget
from idempotency import BODY, WRK_SCRIPT, _free_port, _wait_healthy
from jobs import PG, backend_cpu, cpu_seconds, drop_pg_database, fresh_pg_database
from request_path_apps import new_key, prepare_postgresql, prepare_sqlite

ROOT = Path(__file__).resolve().parent.parent
USTUN = str(Path(sys.executable).with_name("ustun"))
SECRET_KEY = "benchmark-secret-key-of-at-least-32-characters"
GET_SCRIPT = """
wrk.headers["Authorization"] = "Bearer %(key)s"
"""
WORKLOADS = ("POST", "GET")


@dataclass
class Sample:
    """One round of one workload against one server."""

    rate: float
    server_us: float  # CPU µs per request of the server process
    postgresql_us: float  # CPU µs per request of its database's PostgreSQL backends


@dataclass
class Server:
    """One server on a fresh database of its own, until `close()`."""

    name: str  # "hand-written" | "ustun"
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


def hand_written(backend: str, tmp: Path, cleanup: ExitStack) -> Server:
    """The hand-written app on a fresh database."""
    key = new_key()
    env = {"PYTHONPATH": str(ROOT / "benchmarks")}
    if backend == "postgresql":
        env["PG_DATABASE"] = _fresh_database(cleanup)
        env["BENCH_DATABASE"] = f"{PG}/{env['PG_DATABASE']}"
        asyncio.run(prepare_postgresql(env["BENCH_DATABASE"], key))
        factory = "request_path_apps:asyncpg_app"
    else:
        env["BENCH_DATABASE"] = str(tmp / "hand-written.db")
        prepare_sqlite(env["BENCH_DATABASE"], key)
        factory = "request_path_apps:aiosqlite_app"
    command = [sys.executable, "-m", "uvicorn", factory, "--factory", "--log-level", "warning"]
    command.append("--no-access-log")
    return _start("hand-written", backend, command, env, key, tmp, cleanup)


def ustun(backend: str, tmp: Path, cleanup: ExitStack) -> Server:
    """`ustun serve --no-worker` on a fresh database, migrated, with a key from `keys create`."""
    # One account sends every request: its token bucket is checked on each (that cost counts),
    # at a rate and burst it never reaches.
    env = {"USTUN_SECRET_KEY": SECRET_KEY, "USTUN_RATE_LIMIT": "1e6", "USTUN_RATE_BURST": "1000000"}
    if backend == "postgresql":
        env["PG_DATABASE"] = _fresh_database(cleanup)
        env["USTUN_DATABASE_URL"] = f"{PG}/{env['PG_DATABASE']}"
    else:
        env["USTUN_DATABASE_URL"] = f"sqlite:///{tmp / 'ustun.db'}"
    full = {**os.environ, **env}
    subprocess.run([USTUN, "migrate"], env=full, check=True, capture_output=True)
    key = subprocess.run(
        [USTUN, "keys", "create", "--account", "bench"],
        env=full,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return _start("ustun", backend, [USTUN, "serve", "--no-worker"], env, key, tmp, cleanup)


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


def profile(server: Server, workload: str, args: argparse.Namespace, tmp: Path) -> None:
    """Load `server` once more while py-spy samples it; print its CPU per request by layer."""
    out = Path(args.profile) / f"{workload.lower()}-{server.backend}.txt"
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
    print_budget(out, _median(server.samples[workload]).server_us)


def _median(samples: list[Sample]) -> Sample:
    return Sample(
        statistics.median(s.rate for s in samples),
        statistics.median(s.server_us for s in samples),
        statistics.median(s.postgresql_us for s in samples),
    )


def report(pairs: list[tuple[Server, Server]], args: argparse.Namespace) -> None:
    print(
        f"\nwrk -t1 -c{args.connections}, {args.rounds} interleaved rounds of {args.seconds:g} s,"
        f" medians; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" {platform.python_implementation()} {platform.python_version()};"
        f" {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f})\n"
    )
    print(
        "| request | backend | hand-written req/s | ustun req/s | **ustun / hand** "
        "| server CPU µs/req hand / ustun | PostgreSQL CPU µs/req hand / ustun |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for workload in WORKLOADS:
        for hand, ours in pairs:
            h, u = _median(hand.samples[workload]), _median(ours.samples[workload])
            pg = (
                f"{h.postgresql_us:.0f} / {u.postgresql_us:.0f}"
                if hand.backend == "postgresql"
                else "-"
            )
            print(
                f"| {workload} | {hand.backend} | {h.rate:,.0f} | {u.rate:,.0f} "
                f"| **{u.rate / h.rate:.2f}** | {h.server_us:.0f} / {u.server_us:.0f} | {pg} |"
            )
    print("\nrounds (req/s):")
    for workload in WORKLOADS:
        for pair in pairs:
            for server in pair:
                rates = " ".join(f"{s.rate:.0f}" for s in server.samples[workload])
                print(f"  {workload:<4} {server.backend:<10} {server.name:<12} {rates}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5, help="per round, server, request")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--profile", metavar="DIR", help="py-spy each ustun server into DIR")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk as the load generator: apt-get install wrk")
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    pairs: list[tuple[Server, Server]] = []
    # Closing `cleanup` stops every server, then drops its database (last in, first out).
    with tempfile.TemporaryDirectory(prefix="ustun-request-path-") as name, ExitStack() as cleanup:
        tmp = Path(name)
        for backend in backends:
            pairs.append((hand_written(backend, tmp, cleanup), ustun(backend, tmp, cleanup)))
        for pair in pairs:
            for server in pair:
                seed(server)
                for workload in WORKLOADS:  # warm-up, not counted
                    wrk(server, workload, 1, args.connections, tmp)
        for round_ in range(args.rounds):
            for workload in WORKLOADS:
                for pair in pairs:
                    for server in pair:
                        sample = wrk(server, workload, args.seconds, args.connections, tmp)
                        server.samples[workload].append(sample)
                        print(
                            f"  round {round_ + 1} {workload} {server.backend}"
                            f" {server.name}: {sample.rate:.0f}/s",
                            file=sys.stderr,
                            flush=True,
                        )
        report(pairs, args)
        if args.profile:
            print()
            for workload in WORKLOADS:
                for _, ours in pairs:
                    profile(ours, workload, args, tmp)


if __name__ == "__main__":
    main()
