"""ustun.django against hand-written Django and django-idempotency-key (issue 30).

One DRF `POST /payments` that writes the payment and an event row in one `transaction.atomic`,
in four variants (benchmarks/django_bench/payments/views.py):

- (a) by hand, no idempotency; the event is a row of the app's own outbox table;
- (b) (a) with ustun's own statements run by hand, as `@idempotent` runs them (`lock_key`, the
  payment, `emit`, `settle_key`): the ceiling of ustun's SQL shape;
- (c) (a) under django-idempotency-key 1.3 (its middleware, `@idempotency_key`, its
  CacheKeyStorage on Django's database cache in the same database, its per-process lock);
- (d) ustun: `@idempotent("required")` and `emit`.

For each backend (PostgreSQL, SQLite) it makes a fresh database, runs `manage.py migrate` (ustun's
tables too) and `createcachetable`, and starts one gunicorn per variant (WSGI, 4 sync workers,
each with a persistent database connection). A load generator in a process of its own (asyncio,
no keep-alive, as gunicorn's sync workers close each connection) keeps `--connections` requests
in flight, each with a fresh Idempotency-Key; any answer but 201 stops the run. After a warm-up
the variants are loaded in interleaved rounds (a b c d a b c d), `--seconds` each. It prints
req/s per round and their mean, CPU µs per request of gunicorn (master and workers) and of the
PostgreSQL backends of the database, and the ratios (b)/(a), (c)/(a), (d)/(a), (d)/(b): of the
mean req/s, per round, and of the requests one CPU-second serves (gunicorn's and PostgreSQL's
CPU per request, inverted; the load generator's and PostgreSQL's shared processes' are not
counted). On a machine whose other load swings, the rates of single rounds swing with it and
the CPU per request holds better.

    .venv/bin/python benchmarks/django.py [--seconds 5] [--rounds 2] [--backend both] [--json]

With `--profile DIR`, one more load per variant runs under `py-spy record --subprocesses --gil`
(the gunicorn workers, sampled when they hold the GIL) and it prints each variant's Python CPU
per request split by layer, and what is left of the measured CPU (C code that releases the GIL:
psycopg's waits, SQLite's engine; the kernel). Under load py-spy also samples a thread that holds
the GIL while it waits for a core: read the split as ±20 %.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust; `USTUN_BENCH_PG` to change it).
django-idempotency-key's cache keeps Django's default MAX_ENTRIES (300, culling a third past it)
unless `--cache-max-entries N`: a cache that holds a day of keys runs COUNT(*) over all of them
on every set.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from idempotency import _free_port
from jobs import PG, backend_cpu, drop_pg_database, fresh_pg_database, processes_cpu

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "django_bench"
BIN = Path(sys.executable).parent
VARIANTS = ("a", "b", "c", "d")
LABELS = {
    "a": "(a) by hand, no idempotency",
    "b": "(b) by hand, ustun's statements",
    "c": "(c) django-idempotency-key",
    "d": "(d) ustun @idempotent + emit",
}
RATIOS = (("b", "a"), ("c", "a"), ("d", "a"), ("d", "b"))
BODY = b'{"amount":1250,"currency":"EUR"}'
WORKERS = 4
STARTUP = 120.0  # seconds gunicorn may take to answer, on a loaded machine


@dataclass
class Sample:
    """One round of one variant."""

    rate: float  # requests/s
    gunicorn_us: float  # CPU µs per request of gunicorn's master and workers
    postgresql_us: float  # CPU µs per request of the database's PostgreSQL backends


@dataclass
class Server:
    """One variant's gunicorn on the backend's database, until `close()`."""

    variant: str
    backend: str
    proc: subprocess.Popen[bytes]
    url: str
    database: str | None  # the PostgreSQL database, to find its backends
    samples: list[Sample] = field(default_factory=list)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the load generator, in a process of its own ---------------------------------------------


async def _load(url: str, seconds: float, connections: int, run: str) -> dict[str, Any]:
    """`connections` clients POSTing to `url` for `seconds`, one connection per request (as
    gunicorn's sync workers answer), a fresh Idempotency-Key each; count answers by status."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n"
        "Connection: close\r\nIdempotency-Key: "
    ).encode()
    tail = b"\r\n\r\n" + BODY
    statuses: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def client(n: int) -> None:
        sent = 0
        while loop.time() < deadline:
            sent += 1
            try:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(head + f"{run}-{n}-{sent}".encode() + tail)
                answer = await reader.read()
                writer.close()
                statuses[answer[9:12].decode() or "empty"] += 1
            except OSError as error:
                statuses[type(error).__name__] += 1

    began = loop.time()
    await asyncio.gather(*(client(n) for n in range(connections)))
    return {"seconds": loop.time() - began, "statuses": dict(statuses)}


def load_main(url: str, seconds: float, connections: int) -> None:
    try:
        from uvloop import run as run_loop
    except ImportError:
        run_loop = asyncio.run  # type: ignore[assignment]
    print(json.dumps(run_loop(_load(url, seconds, connections, uuid.uuid4().hex))))


# --- servers and measures --------------------------------------------------------------------


def _env(database_url: str, variant: str, cache_max_entries: int | None) -> dict[str, str]:
    # Not the benchmarks folder on the path: this file's name would hide Django.
    path = os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "DJANGO_SETTINGS_MODULE": "bench_site.settings",
        "BENCH_DATABASE_URL": database_url,
        "BENCH_VARIANT": variant,
    }
    if cache_max_entries is not None:
        env["BENCH_CACHE_MAX_ENTRIES"] = str(cache_max_entries)
    return env


def prepare(backend: str, tmp: Path, cleanup: ExitStack) -> tuple[str, str | None]:
    """A fresh database for `backend`, migrated (ustun's tables too) and with the cache table;
    its URL and, on PostgreSQL, its name."""
    if backend == "postgresql":
        name = asyncio.run(fresh_pg_database())
        cleanup.callback(lambda: asyncio.run(drop_pg_database(name)))
        url, database = f"{PG}/{name}", name
    else:
        url, database = f"sqlite:///{tmp / 'bench.sqlite3'}", None
    for command in (["migrate", "--no-input"], ["createcachetable"]):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=PROJECT,
            env=_env(url, "d", None),
            check=True,
            capture_output=True,
        )
    return url, database


def serve(
    variant: str,
    backend: str,
    url: str,
    database: str | None,
    args: argparse.Namespace,
    tmp: Path,
    cleanup: ExitStack,
) -> Server:
    """gunicorn (4 sync workers) serving `variant` on the database at `url`."""
    port = _free_port()
    log = tmp / f"gunicorn-{backend}-{variant}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(str(BIN / "gunicorn"), "bench_site.wsgi:application"),
                *("-b", f"127.0.0.1:{port}", "-w", str(WORKERS), "--no-control-socket"),
            ],
            cwd=PROJECT,
            env=_env(url, variant, args.cache_max_entries),
            stdout=out,
            stderr=out,
        )
    server = Server(variant, backend, proc, f"http://127.0.0.1:{port}/{variant}/payments", database)
    cleanup.callback(server.close)
    deadline = time.monotonic() + STARTUP
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn {backend} ({variant}) exited:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url, timeout=1).status_code == 405:  # up: POST only
                return server
        if time.monotonic() > deadline:
            raise SystemExit(f"gunicorn {backend} ({variant}) did not answer in {STARTUP:g} s")
        time.sleep(0.2)


def gunicorn_pids(master: int) -> list[int]:
    """gunicorn's master and its workers (Linux /proc)."""
    pids = [master]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The fields after the command's closing parenthesis: state, ppid, ...
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == master:
                pids.append(int(stat.parent.name))
    return pids


def load(server: Server, seconds: float, connections: int) -> Sample:
    """One load of `seconds` on `server`; its rate and the CPU per request it cost."""
    pids = gunicorn_pids(server.proc.pid)
    backends = asyncio.run(backend_cpu(server.database))
    cpu = processes_cpu(pids)
    out = subprocess.run(
        [sys.executable, __file__, "load", server.url, str(seconds), str(connections)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    gunicorn = sum(s - cpu.get(pid, 0.0) for pid, s in processes_cpu(pids).items())
    postgresql = sum(
        s - backends.get(pid, 0.0) for pid, s in asyncio.run(backend_cpu(server.database)).items()
    )
    result = json.loads(out)
    statuses: dict[str, int] = result["statuses"]
    if set(statuses) != {"201"}:
        raise SystemExit(f"{server.backend} ({server.variant}): answers {statuses}")
    count = statuses["201"]
    return Sample(count / result["seconds"], gunicorn / count * 1e6, postgresql / count * 1e6)


# --- profiles -------------------------------------------------------------------------------

# (layer, file-path fragments); the first layer, innermost frame first, that matches wins.
LAYERS = (
    ("driver: psycopg / sqlite3", ("psycopg/", "psycopg_binary", "sqlite3/", "backends/sqlite3/")),
    ("SQLAlchemy: compile, bind/result processing", ("sqlalchemy/",)),
    ("ustun: plans, statements, DbapiConnection", ("ustun/store/",)),
    ("ustun: settings, secret box, keys", ("ustun/settings", "ustun/service/", "pydantic")),
    (
        "ustun: idempotency (decorator, hosted, decision, sealing, fingerprint)",
        ("ustun/django/idempotency", "ustun/idempotency/", "ustun/http/"),
    ),
    ("ustun: emit, ids, clock, other", ("ustun/",)),
    ("django-idempotency-key", ("idempotency_key/",)),
    ("Django ORM, transactions", ("django/db/",)),
    ("DRF: serializer, request, response, render", ("rest_framework/",)),
    ("Django: handler, middleware, urls, http", ("django/",)),
    ("gunicorn: accept, parse, send", ("gunicorn/",)),
    # The benchmark's views: what they run themselves (their calls go to the layers above).
    ("the view's own code (payments/views.py)", ("payments/",)),
)


PROFILE_RATE = 250  # samples/s
OUTSIDE = "measured CPU not sampled holding the GIL (driver, SQLite, kernel)"


def split(profile: Path) -> Counter[str]:
    """Samples of `profile` (py-spy raw: `frame;frame;... count`) per layer."""
    layers: Counter[str] = Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        layer = "other"
        for frame in reversed(frames):
            path = frame.rsplit("(", 1)[-1]
            match = next((name for name, parts in LAYERS if any(p in path for p in parts)), None)
            if match is not None:
                layer = match
                break
        layers[layer] += int(count)
    return layers


def profile(server: Server, args: argparse.Namespace) -> Counter[str]:
    """One more load of `server` while py-spy samples its workers when they hold the GIL:
    CPU µs per request of each layer's Python (a driver's waits, SQLite's engine and other C
    code that releases the GIL are left out)."""
    out = Path(args.profile) / f"{server.backend}-{server.variant}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "load", server.url, str(args.seconds + 2)]
    with subprocess.Popen(
        [*command, str(args.connections)], stdout=subprocess.PIPE, text=True
    ) as load:
        time.sleep(1)  # the steady state, not the start
        subprocess.run(
            [
                *(str(BIN / "py-spy"), "record", "--nonblocking", "--subprocesses", "--gil"),
                *("--pid", str(server.proc.pid), "--duration", str(int(args.seconds))),
                *("--rate", str(PROFILE_RATE), "--format", "raw", "--output", str(out)),
            ],
            check=True,
            capture_output=True,
        )
        result = json.loads(load.communicate()[0])
    if load.returncode != 0:
        raise SystemExit(f"the load failed while profiling {server.backend} ({server.variant})")
    requests = sum(result["statuses"].values()) / result["seconds"] * int(args.seconds)
    us_per_sample = 1e6 / PROFILE_RATE / requests
    layers = Counter({name: n * us_per_sample for name, n in split(out).items()})
    measured = _mean([s.gunicorn_us for s in server.samples])
    layers[OUTSIDE] = measured - sum(layers.values())
    return layers


def print_profiles(profiles: dict[str, dict[str, Counter[str]]]) -> None:
    for backend, variants in profiles.items():
        print(f"\n{backend}: gunicorn CPU µs/req by layer (py-spy --gil)\n")
        print("| layer | " + " | ".join(f"({v})" for v in variants) + " |")
        print("|---|" + "---:|" * len(variants))
        for name in [*(name for name, _ in LAYERS), "other", OUTSIDE]:
            cells = " | ".join(f"{split_[name]:,.0f}" for split_ in variants.values())
            print(f"| {name} | {cells} |")


# --- the report ------------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def summary(servers: dict[str, Server]) -> dict[str, Any]:
    """Per variant its rounds and means; the ratios of mean rates, per round, and of the
    requests one CPU-second serves (gunicorn's and PostgreSQL's CPU per request, inverted)."""
    variants = {
        v: {
            "rounds": [asdict(s) for s in server.samples],
            "rate": _mean([s.rate for s in server.samples]),
            "gunicorn_us": _mean([s.gunicorn_us for s in server.samples]),
            "postgresql_us": _mean([s.postgresql_us for s in server.samples]),
        }
        for v, server in servers.items()
    }
    cpu = {v: row["gunicorn_us"] + row["postgresql_us"] for v, row in variants.items()}
    ratios = {
        f"{x}/{y}": {
            "mean": variants[x]["rate"] / variants[y]["rate"],
            "cpu": cpu[y] / cpu[x],
            "rounds": [
                sx.rate / sy.rate
                for sx, sy in zip(servers[x].samples, servers[y].samples, strict=True)
            ],
        }
        for x, y in RATIOS
    }
    return {"variants": variants, "ratios": ratios}


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.rounds} interleaved rounds of {args.seconds:g} s, {args.connections} connections,"
        f" gunicorn {WORKERS} sync workers; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" {platform.python_implementation()} {platform.python_version()};"
        f" {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f})"
    )
    for backend, result in results.items():
        print(f"\n{backend}\n")
        print(
            "| variant | req/s per round | req/s mean | gunicorn CPU µs/req "
            "| PostgreSQL CPU µs/req |"
        )
        print("|---|---:|---:|---:|---:|")
        for v in VARIANTS:
            row = result["variants"][v]
            rounds = " / ".join(f"{r['rate']:,.0f}" for r in row["rounds"])
            pg = f"{row['postgresql_us']:,.0f}" if backend == "postgresql" else "-"
            print(
                f"| {LABELS[v]} | {rounds} | {row['rate']:,.0f} | {row['gunicorn_us']:,.0f} "
                f"| {pg} |"
            )
        print()
        for name, ratio in result["ratios"].items():
            rounds = " / ".join(f"{r:.2f}" for r in ratio["rounds"])
            target = "  (target >= 0.90)" if name == "d/b" else ""
            print(
                f"  ({name[0]})/({name[2]}) = {ratio['mean']:.2f}   rounds {rounds}"
                f"   per CPU-second {ratio['cpu']:.2f}{target}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5, help="per round and variant")
    parser.add_argument("--warmup", type=float, default=2, help="seconds per variant, first")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--cache-max-entries", type=int, help="(c)'s cache MAX_ENTRIES")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--profile", metavar="DIR", help="py-spy each variant into DIR")
    args = parser.parse_args()
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    results: dict[str, dict[str, Any]] = {}
    profiles: dict[str, dict[str, Counter[str]]] = {}
    for backend in backends:
        # Closing `cleanup` stops the servers, then drops the database (last in, first out).
        with tempfile.TemporaryDirectory(prefix="ustun-django-") as name, ExitStack() as cleanup:
            tmp = Path(name)
            url, database = prepare(backend, tmp, cleanup)
            servers = {v: serve(v, backend, url, database, args, tmp, cleanup) for v in VARIANTS}
            for server in servers.values():
                load(server, args.warmup, args.connections)
            for round_ in range(args.rounds):
                for server in servers.values():
                    sample = load(server, args.seconds, args.connections)
                    server.samples.append(sample)
                    print(
                        f"  round {round_ + 1} {backend} ({server.variant}): {sample.rate:.0f}/s,"
                        f" gunicorn {sample.gunicorn_us:.0f} µs/req,"
                        f" PostgreSQL {sample.postgresql_us:.0f} µs/req",
                        file=sys.stderr,
                        flush=True,
                    )
            results[backend] = summary(servers)
            if args.profile:
                profiles[backend] = {v: profile(s, args) for v, s in servers.items()}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        report(results, args)
        print_profiles(profiles)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "load":
        load_main(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
