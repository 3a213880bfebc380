"""ustun.flask and ustun.litestar against the same views written by hand (issue 31).

One `POST /payments` that writes the payment and an event in one transaction, in three variants
per framework (benchmarks/frameworks_apps/):

- (a) by hand, no idempotency; the event is a row of the app's own outbox table;
- (b) (a) with ustun's own statements run by hand, as ustun runs them (the key's lock and read,
  the payment, `emit`'s event and deliveries, the record) in the same transaction: the ceiling
  of ustun's SQL shape;
- (c) ustun: Flask's `Ustun(app, db)` with `@idempotent("required")` and `emit`; Litestar's
  `UstunPlugin(db)` with `opt={"idempotency": "required"}`, the `uow` dependency and
  `ustun.webhooks.sending.outbox.emit`.

Flask runs on Flask-SQLAlchemy (psycopg 3 or sqlite3) under gunicorn (`--gunicorn-workers`
sync workers, 4 by default, each with its one pooled connection); Litestar on ustun's
`Database` (asyncpg or aiosqlite; (a) and (b) write through its units of work too, so that the
driver and the pools are (c)'s) under uvicorn (`--uvicorn-workers`, 2 by default). For each
framework and backend (PostgreSQL, SQLite) it makes a fresh database with ustun's tables and the
benchmark's own, starts one server per variant, and loads them with a load generator in a
process of its own (benchmarks/framework_bench.py: `--connections` requests in flight, each with
a fresh Idempotency-Key; a new connection per request for gunicorn's sync workers, kept-alive
connections for uvicorn); any answer but 201 stops the run. After a warm-up the variants are
loaded in interleaved rounds (a b c a b c), `--seconds` each. It prints, per backend, req/s per
round and their mean, the CPU µs per request of the server's processes (master and workers) and
of the PostgreSQL backends of the database, and the ratios (c)/(b) (the target: at least 0.90
for Flask, 0.85 for Litestar) and (b)/(a): of the mean rates, per round, and of the requests one
CPU-second serves (the server's and PostgreSQL's CPU per request, inverted).

    .venv/bin/python benchmarks/frameworks.py [--backend both] [--framework both]
        [--seconds 5] [--rounds 2] [--json] [--profile DIR] [--in-process N]

After the rounds it counts the rows: a payment per 201, an outbox row per (a), an event and an
idempotency record per (b) and (c).

With `--profile DIR`, one more load per variant runs under `py-spy record --subprocesses`
(every thread not idle) and it prints each variant's server CPU per request split by layer,
scaled down to the measured CPU when py-spy sampled more. Read it with care: py-spy takes a
uvicorn worker idle in uvloop for a busy one (the samples of uvicorn's workers are their wall
time), and on a loaded machine it samples threads waiting for a core.

With `--in-process N`, each variant's app is called without a server, N requests one after the
other, in a process of its own per variant and round (Flask's WSGI callable; Litestar's ASGI app
after its lifespan's startup, as uvicorn calls it): CPU µs per request of all threads (the
process's CPU time, which other processes' load hardly moves), and the main thread's split by
layer from cProfile timed on the thread's CPU clock (not the waits for the database).

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust; `USTUN_BENCH_PG` to change it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from framework_bench import BIN, BODY, mean, measure, process_tree, py_spy, wait_up
from idempotency import _free_port
from jobs import PG, drop_pg_database, fresh_pg_database

HERE = Path(__file__).resolve().parent
APPS = HERE / "frameworks_apps"
sys.path.insert(0, str(APPS))

from bench_tables import ACCOUNT, metadata  # noqa: E402  (frameworks_apps/)

from ustun.store import Database  # noqa: E402
from ustun.store.accounts import account_id  # noqa: E402
from ustun.store.migrate import upgrade  # noqa: E402
from ustun.store.plans import run  # noqa: E402

FRAMEWORKS = ("flask", "litestar")
VARIANTS = ("a", "b", "c")
LABELS = {
    "a": "(a) by hand, no idempotency",
    "b": "(b) by hand, ustun's statements",
    "c": "(c) ustun",
}
SERVERS = {"flask": "gunicorn", "litestar": "uvicorn"}
TARGETS = {"flask": 0.90, "litestar": 0.85}  # (c)/(b), issue 31
RATIOS = (("c", "b"), ("b", "a"))
ROWS = ("bench_payment", "bench_event", "webhook_events", "idempotency_records")


@dataclass
class Sample:
    """One round of one variant."""

    rate: float  # requests/s
    server_us: float  # CPU µs per request of the server's master and workers
    postgresql_us: float  # CPU µs per request of the database's PostgreSQL backends


@dataclass
class Server:
    """One variant's server on the backend's database, until `close()`."""

    framework: str
    variant: str
    backend: str
    proc: subprocess.Popen[bytes]
    url: str
    database: str | None  # the PostgreSQL database, to find its backends
    log: Path
    samples: list[Sample] = field(default_factory=list)
    answered: int = 0  # the 201s of its loads so far
    workers: list[int] | None = None  # its workers, once it was asked to stop

    @property
    def keep_alive(self) -> bool:
        """uvicorn keeps connections alive; gunicorn's sync workers close each one."""
        return self.framework == "litestar"

    def stop(self) -> None:
        """Ask the server to stop (once): SIGINT, gunicorn's quick shutdown (on SIGTERM an idle
        sync worker finishes its select() first) and uvicorn's usual one."""
        if self.workers is None:
            self.workers = process_tree(self.proc.pid)[1:]
            self.proc.send_signal(signal.SIGINT)

    def close(self) -> None:
        """Stop the server; its master is killed once its workers are gone (gunicorn's takes
        seconds more to exit by itself)."""
        self.stop()
        workers = self.workers or []
        deadline = time.monotonic() + 20
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- databases, servers and measures ---------------------------------------------------------


async def _migrate(url: str) -> None:
    """ustun's tables, the benchmark's, and the account of the events."""
    db = Database(url)
    try:
        await upgrade(db)
        async with db.unit_of_work() as uow:
            await uow.conn.run_sync(metadata.create_all)
            await run(account_id(ACCOUNT), uow.conn)
    finally:
        await db.dispose()


def prepare(backend: str, tmp: Path, cleanup: ExitStack) -> tuple[str, str | None]:
    """A fresh database for `backend` with its tables; its URL and, on PostgreSQL, its name."""
    if backend == "postgresql":
        name = asyncio.run(fresh_pg_database())
        cleanup.callback(lambda: asyncio.run(drop_pg_database(name)))
        url, database = f"{PG}/{name}", name
    else:
        url, database = f"sqlite:///{tmp / 'bench.sqlite3'}", None
    asyncio.run(_migrate(url))
    return url, database


def _command(framework: str, port: int, args: argparse.Namespace) -> list[str]:
    if framework == "flask":
        return [
            *(str(BIN / "gunicorn"), "flask_bench:app", "-b", f"127.0.0.1:{port}"),
            *("-w", str(args.gunicorn_workers), "--no-control-socket"),
            # The app imported once, before the fork: a loaded machine starts it in seconds.
            "--preload",
        ]
    return [
        *(str(BIN / "uvicorn"), "litestar_bench:app", "--host", "127.0.0.1", "--port", str(port)),
        *("--workers", str(args.uvicorn_workers), "--no-access-log", "--log-level", "warning"),
    ]


async def _count_rows(url: str) -> dict[str, int]:
    db = Database(url)
    try:
        async with db.read() as conn:
            return {
                table: (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
                for table in ROWS
            }
    finally:
        await db.dispose()


def check_rows(url: str, servers: dict[str, Server]) -> None:
    """Each 201 wrote what its variant writes: a payment; (a) its own event row, (b) and (c)
    ustun's event and the key's record."""
    a, b, c = (servers[v].answered for v in VARIANTS)
    expected = {ROWS[0]: a + b + c, ROWS[1]: a, ROWS[2]: b + c, ROWS[3]: b + c}
    found = asyncio.run(_count_rows(url))
    if found != expected:
        raise SystemExit(f"rows {found}, expected {expected}")


def serve(
    framework: str,
    variant: str,
    backend: str,
    url: str,
    database: str | None,
    args: argparse.Namespace,
    tmp: Path,
    cleanup: ExitStack,
) -> Server:
    """`framework`'s server of `variant` on the database at `url`, started (`up` waits for
    it to answer)."""
    port = _free_port()
    if framework == "flask" and url.startswith("postgresql"):
        url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    path = os.pathsep.join(filter(None, [str(APPS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "BENCH_DATABASE_URL": url, "BENCH_VARIANT": variant}
    log = tmp / f"{framework}-{backend}-{variant}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            _command(framework, port, args), cwd=APPS, env=env, stdout=out, stderr=out
        )
    endpoint = f"http://127.0.0.1:{port}/{variant}/payments"
    server = Server(framework, variant, backend, proc, endpoint, database, log)
    cleanup.callback(server.close)
    return server


def up(server: Server) -> None:
    """Until `server` answers."""
    name = f"{SERVERS[server.framework]} {server.framework} {server.backend} ({server.variant})"
    wait_up(server.proc, server.url, name, server.log)


def load(server: Server, seconds: float, connections: int) -> Sample:
    """One load of `seconds` on `server`; its rate and the CPU per request it cost."""
    done = measure(
        server.proc.pid,
        server.database,
        server.url,
        seconds,
        connections,
        keep_alive=server.keep_alive,
    )
    if set(done.statuses) != {"201"}:
        raise SystemExit(
            f"{server.framework} {server.backend} ({server.variant}): answers {done.statuses}"
        )
    count = done.statuses["201"]
    server.answered += count
    return Sample(
        count / done.seconds, done.server_cpu / count * 1e6, done.postgresql_cpu / count * 1e6
    )


# --- profiles -------------------------------------------------------------------------------

# (layer, file-path fragments); the first layer, innermost frame first, that matches wins.
LAYERS = (
    ("drivers: psycopg, asyncpg, sqlite3, aiosqlite", ("psycopg", "asyncpg/", "sqlite3/")),
    ("SQLAlchemy: compile, bind/result processing", ("sqlalchemy/",)),
    ("ustun: plans, statements, units of work", ("ustun/store/",)),
    ("ustun: settings, secret box, keys", ("ustun/settings", "ustun/keys", "pydantic")),
    (
        "ustun: idempotency (decorator, middleware, hosted, decision, fingerprint)",
        ("ustun/flask/idempotency", "ustun/idempotency/", "ustun/http/", "ustun/litestar/"),
    ),
    ("ustun: emit, ids, clock, other", ("ustun/",)),
    ("Flask-SQLAlchemy", ("flask_sqlalchemy/",)),
    ("Flask, Werkzeug", ("flask/", "werkzeug/")),
    ("Litestar, msgspec", ("litestar/", "msgspec/")),
    ("gunicorn, uvicorn, asyncio: accept, parse, send", ("gunicorn/", "uvicorn/", "asyncio/")),
    # The benchmark's views: what they run themselves (their calls go to the layers above).
    ("the view's own code (frameworks_apps/)", ("frameworks_apps/",)),
)
OUTSIDE = "measured CPU not sampled holding the GIL (drivers, SQLite, kernel)"
SAMPLED = "py-spy's samples / the measured CPU (above 1: scaled down to it)"


def profile(server: Server, args: argparse.Namespace) -> dict[str, float]:
    """One more load of `server` under py-spy: CPU µs per request of each layer's Python, and
    what is left of the measured CPU."""
    out = Path(args.profile) / f"{server.framework}-{server.backend}-{server.variant}.txt"
    layers = py_spy(
        server.proc.pid,
        server.url,
        args.seconds,
        args.connections,
        out,
        LAYERS,
        keep_alive=server.keep_alive,
        gil=False,
    )
    measured, sampled = mean([s.server_us for s in server.samples]), sum(layers.values())
    if sampled > measured:
        # py-spy also sampled threads holding the GIL while they waited for a core (a loaded
        # machine): the layers' shares hold, scaled to the CPU the processes did run.
        layers = {name: us * measured / sampled for name, us in layers.items()}
    layers[OUTSIDE] = measured - sum(layers.values())
    layers[SAMPLED] = sampled / measured
    return layers


def print_profiles(profiles: dict[str, dict[str, dict[str, dict[str, float]]]]) -> None:
    for backend, frameworks in profiles.items():
        for framework, variants in frameworks.items():
            server = SERVERS[framework]
            print(f"\n{framework}, {backend}: {server} CPU µs/req by layer (py-spy)\n")
            print("| layer | " + " | ".join(f"({v})" for v in variants) + " | (c) - (b) |")
            print("|---|" + "---:|" * (len(variants) + 1))
            for name in [*(name for name, _ in LAYERS), "other", OUTSIDE]:
                cells = " | ".join(f"{split[name]:,.0f}" for split in variants.values())
                extra = variants["c"][name] - variants["b"][name]
                print(f"| {name} | {cells} | {extra:+,.0f} |")
            cells = " | ".join(f"{split[SAMPLED]:.2f}" for split in variants.values())
            print(f"| {SAMPLED} | {cells} | |")


# --- in process: the app's own CPU, without server or HTTP ---------------------------------

C_CODE = "C functions (drivers, hashing, JSON, …)"
THREADS = "other threads (aiosqlite's: SQLite itself)"


def _layer_of(filename: str) -> str:
    if filename == "~":
        return C_CODE
    return next((name for name, parts in LAYERS if any(p in filename for p in parts)), "other")


def _flask_calls(variant: str, requests: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """The Flask app's WSGI callable on `requests` prepared requests: (one call, the end)."""
    from flask_bench import app
    from werkzeug.test import EnvironBuilder

    environs = iter(
        [
            EnvironBuilder(
                path=f"/{variant}/payments",
                method="POST",
                data=BODY,
                headers=[("Idempotency-Key", uuid.uuid4().hex)],
                content_type="application/json",
            ).get_environ()
            for _ in range(requests)
        ]
    )

    def start_response(status: str, headers: Any, *_: Any) -> Callable[[bytes], object]:
        if not status.startswith("201"):
            raise SystemExit(f"flask ({variant}) answered {status}")
        return lambda _: None

    def call() -> None:
        for _ in app(next(environs), start_response):
            pass

    return call, lambda: None


def _litestar_calls(variant: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """The Litestar app as uvicorn calls it, in a running event loop, after its startup."""
    from litestar_bench import app

    loop = asyncio.new_event_loop()
    lifespan: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def start() -> asyncio.Task[None]:
        """The app's lifespan as uvicorn runs it: a task of its own, until shutdown."""
        started = loop.create_future()

        async def told(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set_result(None)
            elif message["type"] == "lifespan.startup.failed":
                started.set_exception(SystemExit(message.get("message", "startup failed")))

        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        task = loop.create_task(app(scope, lifespan.get, told))  # type: ignore[arg-type]
        await lifespan.put({"type": "lifespan.startup"})
        await started
        return task

    running = loop.run_until_complete(start())
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 201:
            raise SystemExit(f"litestar ({variant}) answered {message['status']}")

    def call() -> None:
        key = (b"idempotency-key", uuid.uuid4().hex.encode())
        scope = {
            **{"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1"},
            **{"method": "POST", "scheme": "http", "path": f"/{variant}/payments"},
            **{"raw_path": f"/{variant}/payments".encode(), "query_string": b""},
            **{"root_path": "", "headers": [*headers, key], "state": {}},
            **{"client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)},
        }
        loop.run_until_complete(app(scope, receive, send))  # type: ignore[arg-type]

    def end() -> None:
        lifespan.put_nowait({"type": "lifespan.shutdown"})
        loop.run_until_complete(running)
        loop.close()

    return call, end


def cpu_main(framework: str, variant: str, requests: int) -> None:
    """One variant's app in this process (its env set by the caller): the CPU µs per request
    of `requests` calls one after the other (all threads', and this thread's), then the shares
    of this thread's layers under cProfile (its own time per function, by file)."""
    warm = 50
    if framework == "flask":
        call, end = _flask_calls(variant, warm + 2 * requests)
    else:
        call, end = _litestar_calls(variant)
    for _ in range(warm):
        call()
    began, began_here = time.process_time(), time.thread_time()
    for _ in range(requests):
        call()
    us = (time.process_time() - began) / requests * 1e6
    here = (time.thread_time() - began_here) / requests * 1e6
    profiler = cProfile.Profile(time.thread_time)  # CPU, not the waits for the database
    profiler.enable()
    for _ in range(requests):
        call()
    profiler.disable()
    end()
    layers: Counter[str] = Counter()
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, own, _, _) in stats.items():
        layers[_layer_of(filename)] += own
    total = sum(layers.values())
    shares = {name: seconds / total for name, seconds in layers.items()}
    print(json.dumps({"us": us, "main_thread_us": here, "shares": shares}))


def in_process(framework: str, url: str, requests: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Each variant's `cpu_main` in a process of its own, on the database at `url`, in
    interleaved rounds; per variant the means of its rounds."""
    if framework == "flask" and url.startswith("postgresql"):
        url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    path = os.pathsep.join(filter(None, [str(APPS), os.environ.get("PYTHONPATH")]))
    found: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            env = {**os.environ, "PYTHONPATH": path, "BENCH_DATABASE_URL": url}
            env["BENCH_VARIANT"] = variant
            done = subprocess.run(
                [sys.executable, __file__, "cpu", framework, variant, str(requests)],
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise SystemExit(f"{framework} ({variant}) in process failed:\n{done.stderr}")
            found[variant].append(json.loads(done.stdout))
    return {
        v: {
            "us": mean([r["us"] for r in runs]),
            "main_thread_us": mean([r["main_thread_us"] for r in runs]),
            "rounds": [r["us"] for r in runs],
            "shares": {
                name: mean([r["shares"].get(name, 0.0) for r in runs])
                for name in {name for r in runs for name in r["shares"]}
            },
        }
        for v, runs in found.items()
    }


def print_in_process(found: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> None:
    names = [*(name for name, _ in LAYERS), C_CODE, "other", THREADS]
    for backend, frameworks in found.items():
        for framework, variants in frameworks.items():
            print(
                f"\n{framework}, {backend}, in process (no server, one request at a time):"
                " CPU µs/req; the main thread's split by cProfile's own time per layer\n"
            )
            print("| layer | (a) | (b) | (c) | (c) - (b) |")
            print("|---|---:|---:|---:|---:|")
            split = {
                v: {
                    **{n: row["main_thread_us"] * row["shares"].get(n, 0.0) for n in names},
                    THREADS: row["us"] - row["main_thread_us"],
                }
                for v, row in variants.items()
            }
            for name in names:
                cells = " | ".join(f"{split[v][name]:,.0f}" for v in VARIANTS)
                print(f"| {name} | {cells} | {split['c'][name] - split['b'][name]:+,.0f} |")
            cells = " | ".join(f"**{variants[v]['us']:,.0f}**" for v in VARIANTS)
            extra = variants["c"]["us"] - variants["b"]["us"]
            print(f"| all (mean of the rounds) | {cells} | **{extra:+,.0f}** |")
            cells = " | ".join(
                " / ".join(f"{us:,.0f}" for us in variants[v]["rounds"]) for v in VARIANTS
            )
            print(f"| all, per round | {cells} | |")


# --- the report ------------------------------------------------------------------------------


def summary(servers: dict[str, Server]) -> dict[str, Any]:
    """Per variant its rounds and means; the ratios of mean rates, per round, and of the
    requests one CPU-second serves (the server's and PostgreSQL's CPU per request, inverted)."""
    variants: dict[str, dict[str, Any]] = {
        v: {
            "rounds": [asdict(s) for s in server.samples],
            "rate": mean([s.rate for s in server.samples]),
            "server_us": mean([s.server_us for s in server.samples]),
            "postgresql_us": mean([s.postgresql_us for s in server.samples]),
        }
        for v, server in servers.items()
    }
    cpu = {v: row["server_us"] + row["postgresql_us"] for v, row in variants.items()}
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


def report(results: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.rounds} interleaved rounds of {args.seconds:g} s, {args.connections} connections;"
        f" gunicorn {args.gunicorn_workers} sync workers (a connection per request),"
        f" uvicorn {args.uvicorn_workers} workers (kept-alive connections);"
        f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" {platform.python_implementation()} {platform.python_version()};"
        f" {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f})"
    )
    for backend, frameworks in results.items():
        print(f"\n{backend}\n")
        print(
            "| framework | variant | req/s per round | req/s mean | server CPU µs/req "
            "| PostgreSQL CPU µs/req |"
        )
        print("|---|---|---:|---:|---:|---:|")
        for framework, result in frameworks.items():
            for v in VARIANTS:
                row = result["variants"][v]
                rounds = " / ".join(f"{r['rate']:,.0f}" for r in row["rounds"])
                pg = f"{row['postgresql_us']:,.0f}" if backend == "postgresql" else "-"
                print(
                    f"| {framework} ({SERVERS[framework]}) | {LABELS[v]} | {rounds} "
                    f"| {row['rate']:,.0f} | {row['server_us']:,.0f} | {pg} |"
                )
    print(
        "\n| backend | framework | (c)/(b) req/s | rounds | per CPU-second | target | met "
        "| (b)/(a) req/s | per CPU-second |"
    )
    print("|---|---|---:|---|---:|---:|---|---:|---:|")
    for backend, frameworks in results.items():
        for framework, result in frameworks.items():
            cb, ba = result["ratios"]["c/b"], result["ratios"]["b/a"]
            target = TARGETS[framework]
            rounds = " / ".join(f"{r:.2f}" for r in cb["rounds"])
            print(
                f"| {backend} | {framework} | {cb['mean']:.2f} | {rounds} | {cb['cpu']:.2f} "
                f"| {target:.2f} | {'yes' if cb['mean'] >= target else 'NO'} "
                f"| {ba['mean']:.2f} | {ba['cpu']:.2f} |"
            )


def bench(
    framework: str, backend: str, args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """`framework` on a fresh `backend` database: its summary, and its profiles and in-process
    measures if asked."""
    began = time.monotonic()
    # Closing `cleanup` stops the servers, then drops the database (last in, first out).
    with tempfile.TemporaryDirectory(prefix="ustun-frameworks-") as name, ExitStack() as cleanup:
        tmp = Path(name)
        url, database = prepare(backend, tmp, cleanup)
        # Started together: on a loaded machine each takes seconds to import its app.
        servers = {
            v: serve(framework, v, backend, url, database, args, tmp, cleanup) for v in VARIANTS
        }
        # Stopped together too: each takes seconds to exit.
        for server in servers.values():
            cleanup.callback(server.stop)
        for server in servers.values():
            up(server)
        print(f"  {framework} {backend}: up in {time.monotonic() - began:.0f} s", file=sys.stderr)
        for server in servers.values():
            load(server, args.warmup, args.connections)
        for round_ in range(args.rounds):
            for server in servers.values():
                sample = load(server, args.seconds, args.connections)
                server.samples.append(sample)
                print(
                    f"  round {round_ + 1} {framework} {backend} ({server.variant}):"
                    f" {sample.rate:.0f}/s, {SERVERS[framework]} {sample.server_us:.0f} µs/req,"
                    f" PostgreSQL {sample.postgresql_us:.0f} µs/req",
                    file=sys.stderr,
                    flush=True,
                )
        check_rows(url, servers)
        profiles = {v: profile(s, args) for v, s in servers.items()} if args.profile else {}
        alone = in_process(framework, url, args.in_process, args.rounds) if args.in_process else {}
        print(
            f"  {framework} {backend}: loaded in {time.monotonic() - began:.0f} s", file=sys.stderr
        )
    print(f"  {framework} {backend}: stopped in {time.monotonic() - began:.0f} s", file=sys.stderr)
    return summary(servers), profiles, alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--framework", choices=[*FRAMEWORKS, "both"], default="both")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5, help="per round and variant")
    parser.add_argument("--warmup", type=float, default=2, help="seconds per variant, first")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--gunicorn-workers", type=int, default=4)
    parser.add_argument("--uvicorn-workers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--profile", metavar="DIR", help="py-spy each variant into DIR")
    parser.add_argument(
        "--in-process",
        type=int,
        metavar="N",
        help="also call each variant's app in a process of its own, N requests per round",
    )
    args = parser.parse_args()
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    frameworks = list(FRAMEWORKS) if args.framework == "both" else [args.framework]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    profiles: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    in_processes: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for backend in backends:
        for framework in frameworks:
            result, profiled, alone = bench(framework, backend, args)
            results.setdefault(backend, {})[framework] = result
            if profiled:
                profiles.setdefault(backend, {})[framework] = profiled
            if alone:
                in_processes.setdefault(backend, {})[framework] = alone
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        report(results, args)
        print_profiles(profiles)
        print_in_process(in_processes)


if __name__ == "__main__":
    if sys.argv[1:2] == ["cpu"]:
        cpu_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
