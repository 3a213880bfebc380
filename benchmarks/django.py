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
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework_bench import BIN, measure, py_spy, wait_up
from framework_bench import mean as _mean
from idempotency import _free_port
from jobs import PG, drop_pg_database, fresh_pg_database

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "django_bench"
VARIANTS = ("a", "b", "c", "d")
LABELS = {
    "a": "(a) by hand, no idempotency",
    "b": "(b) by hand, ustun's statements",
    "c": "(c) django-idempotency-key",
    "d": "(d) ustun @idempotent + emit",
}
RATIOS = (("b", "a"), ("c", "a"), ("d", "a"), ("d", "b"))
WORKERS = 4


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
    wait_up(proc, server.url, f"gunicorn {backend} ({variant})", log)
    return server


def load(server: Server, seconds: float, connections: int) -> Sample:
    """One load of `seconds` on `server`; its rate and the CPU per request it cost."""
    done = measure(
        server.proc.pid, server.database, server.url, seconds, connections, keep_alive=False
    )
    if set(done.statuses) != {"201"}:
        raise SystemExit(f"{server.backend} ({server.variant}): answers {done.statuses}")
    count = done.statuses["201"]
    return Sample(
        count / done.seconds, done.server_cpu / count * 1e6, done.postgresql_cpu / count * 1e6
    )


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


OUTSIDE = "measured CPU not sampled holding the GIL (driver, SQLite, kernel)"


def profile(server: Server, args: argparse.Namespace) -> dict[str, float]:
    """One more load of `server` while py-spy samples its workers when they hold the GIL:
    CPU µs per request of each layer's Python (a driver's waits, SQLite's engine and other C
    code that releases the GIL are left out)."""
    out = Path(args.profile) / f"{server.backend}-{server.variant}.txt"
    layers = py_spy(
        server.proc.pid,
        server.url,
        args.seconds,
        args.connections,
        out,
        LAYERS,
        keep_alive=False,
    )
    layers[OUTSIDE] = _mean([s.gunicorn_us for s in server.samples]) - sum(layers.values())
    return layers


def print_profiles(profiles: dict[str, dict[str, dict[str, float]]]) -> None:
    for backend, variants in profiles.items():
        print(f"\n{backend}: gunicorn CPU µs/req by layer (py-spy --gil)\n")
        print("| layer | " + " | ".join(f"({v})" for v in variants) + " |")
        print("|---|" + "---:|" * len(variants))
        for name in [*(name for name, _ in LAYERS), "other", OUTSIDE]:
            cells = " | ".join(f"{split_[name]:,.0f}" for split_ in variants.values())
            print(f"| {name} | {cells} |")


# --- the report ------------------------------------------------------------------------------


def summary(servers: dict[str, Server]) -> dict[str, Any]:
    """Per variant its rounds and means; the ratios of mean rates, per round, and of the
    requests one CPU-second serves (gunicorn's and PostgreSQL's CPU per request, inverted)."""
    variants: dict[str, dict[str, Any]] = {
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
    profiles: dict[str, dict[str, dict[str, float]]] = {}
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
    main()
