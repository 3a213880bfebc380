"""Jobs/s end to end: ustun vs procrastinate vs pgqueuer on one PostgreSQL, and ustun on SQLite.

8 concurrent producers enqueue N no-op jobs, one job per transaction, while ONE worker process
drains; the figure is N / (time from the first enqueue to the moment every job is done).
A pgbench run of one-row INSERT transactions with 8 clients on the same server gives the
commit ceiling. Every process runs on uvloop when it is installed (as `ustun worker` and
pgqueuer's own CLI do), on asyncio's loop otherwise: the same for every system.
`--enqueue-only` measures the producers alone (where their CPU goes).
Run:  .venv/bin/python benchmarks/jobs.py [--jobs 2000] [--concurrency 16] [--enqueue-only]
(needs the `bench` extra and PostgreSQL on 127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from ustun import jobs as ustun_jobs

try:
    from uvloop import run as run_loop
except ImportError:
    run_loop = asyncio.run  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
USTUN = str(Path(sys.executable).with_name("ustun"))
PG = os.environ.get("USTUN_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
PRODUCERS = 8
WARMUP_TIMEOUT = 60.0


# The benchmark's job kinds: ustun workers take them from this module (USTUN_JOB_MODULES).
kinds = ustun_jobs.Registry()


@kinds.kind("noop")
async def noop(ctx: ustun_jobs.JobContext) -> None:
    """The benchmark's job: nothing (ustun workers import this module via USTUN_JOB_MODULES)."""


# --- the peers' apps (built lazily: the ustun worker imports this module too) ---------------


def procrastinate_app(dsn: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop_task() -> None:
        return None

    return app


async def pgqueuer_worker(dsn: str, concurrency: int) -> None:
    import pgqueuer

    @asynccontextmanager
    async def factory() -> AsyncIterator[pgqueuer.PgQueuer]:
        conn = await asyncpg.connect(dsn)
        pgq = pgqueuer.PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint("noop")
        async def noop_entry(job: pgqueuer.Job) -> None:
            return None

        try:
            yield pgq
        finally:
            await conn.close()

    # pgqueuer requires max_concurrent_tasks >= 2 * batch_size.
    await pgqueuer.run(
        factory, batch_size=max(1, concurrency // 2), max_concurrent_tasks=concurrency
    )


async def procrastinate_worker(dsn: str, concurrency: int) -> None:
    app = procrastinate_app(dsn)
    async with app.open_async():
        await app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)


# --- measuring -----------------------------------------------------------------------------


async def produce(total: int, enqueue_one: Callable[[], Awaitable[object]]) -> None:
    """PRODUCERS coroutines share `total` enqueues, one job per transaction each."""
    share = [total // PRODUCERS + (i < total % PRODUCERS) for i in range(PRODUCERS)]

    async def producer(count: int) -> None:
        for _ in range(count):
            await enqueue_one()

    await asyncio.gather(*(producer(n) for n in share))


async def wait_done(done: Callable[[], Awaitable[int]], total: int, within: float) -> None:
    deadline = time.monotonic() + within
    while await done() < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {await done()} of {total} jobs done after {within} s")
        await asyncio.sleep(0.05)


async def measure(
    name: str,
    worker: subprocess.Popen[bytes],
    enqueue_one: Callable[[], Awaitable[object]],
    done: Callable[[], Awaitable[int]],
    total: int,
    database: str | None,
) -> float:
    """Warm up with one job, then time `total` jobs from first enqueue to last done.

    Also prints the CPU time per job of the producers (this process), of the worker, and of
    the PostgreSQL backends connected to `database` (not the server's shared processes, nor
    any other load on the same server).
    """
    try:
        await enqueue_one()
        await wait_done(done, 1, WARMUP_TIMEOUT)
        backends = await backend_cpu(database)
        start, cpu, worker_cpu = time.perf_counter(), time.process_time(), cpu_seconds(worker.pid)
        producing = asyncio.create_task(produce(total, enqueue_one))
        await wait_done(done, total + 1, 300)
        elapsed = time.perf_counter() - start
        cpu, worker_cpu = time.process_time() - cpu, cpu_seconds(worker.pid) - worker_cpu
        server_cpu = sum(
            seconds - backends.get(pid, 0.0)
            for pid, seconds in (await backend_cpu(database)).items()
        )
        await producing
    finally:
        worker.terminate()
        worker.wait(30)
    rate = total / elapsed
    print(
        f"{name:<22} {total} jobs in {elapsed:6.2f} s = {rate:7.0f} jobs/s"
        f"   CPU per job: producers {cpu / total * 1e3:.2f} ms,"
        f" worker {worker_cpu / total * 1e3:.2f} ms, PostgreSQL {server_cpu / total * 1e3:.2f} ms",
        flush=True,
    )
    return rate


def cpu_seconds(pid: int) -> float:
    """CPU seconds the live threads of a process have run so far (Linux /proc, in ns).

    Not utime + stime of /proc/PID/stat: those are charged by the clock tick, and a PostgreSQL
    backend that runs ~40 µs per statement is mostly off the CPU when the tick comes (2,000
    reads by PK: 0.00 s there, 0.07 s here). Threads that already exited are not counted.
    """
    nanoseconds = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread exited meanwhile
            nanoseconds += int((task / "schedstat").read_text().split()[0])
    return nanoseconds / 1e9


async def backend_cpu(database: str | None) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to `database` (Linux /proc)."""
    if database is None:
        return {}
    admin = await asyncpg.connect(f"{PG}/postgres")
    try:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = $1"
        pids = [row["pid"] for row in await admin.fetch(query, database)]
    finally:
        await admin.close()
    return processes_cpu(pids)


def processes_cpu(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds so far of each process still alive in `pids`."""
    seconds = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # the process exited meanwhile
            seconds[pid] = cpu_seconds(pid)
    return seconds


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=sys.stderr
    )


def database_of(dsn: str) -> str:
    """The database name at the end of a `postgresql://…/name` DSN."""
    return dsn.rsplit("/", 1)[1]


async def fresh_pg_database() -> str:
    name = f"ustun_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(f"{PG}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return name


async def drop_pg_database(name: str) -> None:
    admin = await asyncpg.connect(f"{PG}/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def bench_ustun(url: str, total: int, concurrency: int, *, in_uow: bool = False) -> float:
    """`in_uow`: each producer opens a unit of work around its enqueue (as an endpoint that also
    writes would); otherwise `jobs.enqueue` alone, as the peers' producers call theirs."""
    from sqlalchemy import func, select

    from ustun.jobs.tables import jobs
    from ustun.store import Database
    from ustun.store.migrate import upgrade

    db = Database(url, pool_size=PRODUCERS)
    await upgrade(db)
    worker = spawn(
        [USTUN, "worker", "--concurrency", str(concurrency)],
        {
            "USTUN_DATABASE_URL": url,
            "USTUN_JOB_MODULES": "jobs",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            "USTUN_LOG_LEVEL": "warning",
            "USTUN_SECRET_KEY": "benchmark-secret-key-of-at-least-32-characters",
            "USTUN_JOB_POLL_INTERVAL": "0.05" if db.is_sqlite else "1.0",
        },
    )

    async def enqueue_one() -> None:
        if in_uow:
            async with db.unit_of_work():
                await ustun_jobs.enqueue(db, "noop")
        else:
            await ustun_jobs.enqueue(db, "noop")

    async def done() -> int:
        async with db.read() as conn:
            query = select(func.count()).select_from(jobs).where(jobs.c.status == "done")
            return int(await conn.scalar(query) or 0)

    backend = ("SQLite" if db.is_sqlite else "PostgreSQL") + (", in uow" if in_uow else "")
    try:
        database = None if db.is_sqlite else db.engine.url.database
        return await measure(f"ustun ({backend})", worker, enqueue_one, done, total, database)
    finally:
        await db.dispose()


async def bench_procrastinate(dsn: str, total: int, concurrency: int) -> float:
    app = procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        task = app.tasks["noop"]
        worker = spawn([PYTHON, __file__, "worker-procrastinate", dsn, str(concurrency)])
        probe = await asyncpg.connect(dsn)

        async def done() -> int:
            query = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            return int(await probe.fetchval(query))

        try:
            return await measure(
                "procrastinate", worker, task.defer_async, done, total, database_of(dsn)
            )
        finally:
            await probe.close()


async def bench_pgqueuer(dsn: str, total: int, concurrency: int) -> float:
    import pgqueuer

    pool = await asyncpg.create_pool(dsn, min_size=PRODUCERS, max_size=PRODUCERS)
    queries = pgqueuer.Queries.from_asyncpg_pool(pool)
    await queries.install()
    worker = spawn([PYTHON, __file__, "worker-pgqueuer", dsn, str(concurrency)])
    enqueued = 0

    async def enqueue_one() -> None:
        nonlocal enqueued
        await queries.enqueue("noop", None)
        enqueued += 1

    async def done() -> int:
        waiting = await pool.fetchval("SELECT count(*) FROM pgqueuer")
        return enqueued - int(waiting)

    try:
        return await measure("pgqueuer", worker, enqueue_one, done, total, database_of(dsn))
    finally:
        await pool.close()


def pgbench(database: str, seconds: int) -> float:
    """Commits/s of one-row INSERT transactions, 8 clients, on the same server."""
    subprocess.run(
        [
            "psql",
            "-q",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            database,
            "-c",
            "CREATE TABLE one_row (id bigserial PRIMARY KEY, v int)",
        ],
        check=True,
    )
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("INSERT INTO one_row (v) VALUES (1);\n")
        script.flush()
        out = subprocess.run(
            [
                "pgbench",
                "-n",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-c",
                str(PRODUCERS),
                "-j",
                "2",
                "-T",
                str(seconds),
                "-f",
                script.name,
                database,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    match = re.search(r"tps = ([\d.]+)", out)
    assert match, out
    return float(match.group(1))


async def enqueue_costs(total: int) -> None:
    """Enqueue only (no worker): where a producer's CPU goes, 8 producers, `total` each."""
    from sqlalchemy import text

    from ustun.store import Database
    from ustun.store.migrate import upgrade

    database = await fresh_pg_database()
    url = f"{PG}/{database}"
    db = Database(url, pool_size=PRODUCERS)
    pool = await asyncpg.create_pool(url, min_size=PRODUCERS, max_size=PRODUCERS)
    try:
        import pgqueuer

        await upgrade(db)
        await pool.execute("CREATE TABLE one_row (id bigserial PRIMARY KEY, v int)")
        queries = pgqueuer.Queries.from_asyncpg_pool(pool)
        await queries.install()

        async def asyncpg_transaction() -> None:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("INSERT INTO one_row (v) VALUES (1)")

        async def unit_of_work_insert() -> None:
            async with db.unit_of_work() as uow:
                await uow.conn.execute(text("INSERT INTO one_row (v) VALUES (1)"))

        async def ustun_enqueue() -> None:
            await ustun_jobs.enqueue(db, "noop")

        async def ustun_enqueue_in_uow() -> None:
            async with db.unit_of_work():
                await ustun_jobs.enqueue(db, "noop")

        async def pgqueuer_enqueue() -> None:
            await queries.enqueue("noop", None)

        for name, enqueue_one in (
            ("asyncpg BEGIN;INSERT;COMMIT", asyncpg_transaction),
            ("unit_of_work() + INSERT", unit_of_work_insert),
            ("ustun jobs.enqueue", ustun_enqueue),
            ("ustun in unit_of_work()", ustun_enqueue_in_uow),
            ("pgqueuer enqueue", pgqueuer_enqueue),
        ):
            await enqueue_one()
            start, cpu = time.perf_counter(), time.process_time()
            await produce(total, enqueue_one)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            print(
                f"{name:<28} {total / elapsed:7.0f}/s   CPU per enqueue {cpu / total * 1e3:.2f} ms"
            )
    finally:
        await pool.close()
        await db.dispose()
        await drop_pg_database(database)


async def main(total: int, concurrency: int, pgbench_seconds: int) -> None:
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"{total} no-op jobs, {PRODUCERS} producers, worker concurrency {concurrency}, "
        f"event loop {run_loop.__module__}"
    )
    rates: dict[str, float] = {}
    for name, bench in (
        ("ustun", bench_ustun),
        ("procrastinate", bench_procrastinate),
        ("pgqueuer", bench_pgqueuer),
        ("ustun-in-uow", functools.partial(bench_ustun, in_uow=True)),
    ):
        database = await fresh_pg_database()
        url = f"{PG}/{database}"
        try:
            rates[name] = await bench(url, total, concurrency)
        finally:
            await drop_pg_database(database)
    with tempfile.TemporaryDirectory() as tmp:
        rates["ustun-sqlite"] = await bench_ustun(f"sqlite:///{tmp}/bench.db", total, concurrency)
    database = await fresh_pg_database()
    try:
        ceiling = pgbench(database, pgbench_seconds)
    finally:
        await drop_pg_database(database)
    print(f"{'pgbench (8 clients)':<22} {ceiling:7.0f} one-row commits/s")
    peer = max(rates["procrastinate"], rates["pgqueuer"])
    print(f"ustun / faster peer       = {rates['ustun'] / peer:5.2f}x (target >= 2x)")
    print(f"ustun / procrastinate     = {rates['ustun'] / rates['procrastinate']:5.2f}x")
    print(f"ustun / pgqueuer          = {rates['ustun'] / rates['pgqueuer']:5.2f}x")
    in_uow = rates["ustun-in-uow"] / peer
    print(f"ustun in uow / faster peer = {in_uow:5.2f}x (each enqueue in a unit of work)")
    print(f"ustun / pgbench commits/s = {rates['ustun'] / ceiling:5.1%} (a job needs >= 2 commits)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("worker-"):
        target = {"worker-procrastinate": procrastinate_worker, "worker-pgqueuer": pgqueuer_worker}
        run_loop(target[sys.argv[1]](sys.argv[2], int(sys.argv[3])))
    else:
        parser = argparse.ArgumentParser(description=__doc__)
        parser.add_argument("--jobs", type=int, default=2000)
        parser.add_argument("--concurrency", type=int, default=16)
        parser.add_argument("--pgbench-seconds", type=int, default=10)
        parser.add_argument(
            "--enqueue-only", action="store_true", help="only the producers' CPU per enqueue"
        )
        options = parser.parse_args()
        if options.enqueue_only:
            run_loop(enqueue_costs(options.jobs))
        else:
            run_loop(main(options.jobs, options.concurrency, options.pgbench_seconds))
