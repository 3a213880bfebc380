"""What `emit`'s plan costs with payload filters, against the plan before them, side by side.

One process, one fresh database per backend, an account with `--plain` endpoints that take
every event (no filter). Rounds alternate between the plan of this tree and, with `--before`,
an older copy of `ustun/webhooks/adapters/plans.py` loaded beside it, so machine load hits
both alike. Each round runs N emits of the plan, each in its own unit of work (a commit each,
as a request would), then N in one unit of work (the plan's statements without commits). Then
`--filtered` endpoints with a payload filter that half the events pass are added, and the
current plan runs again. It prints the median over the rounds of wall µs and of this process's
CPU µs per emit.

    git show d5a9c12~1:src/ustun/webhooks/adapters/plans.py > /tmp/plans_before.py
    .venv/bin/python benchmarks/emit_filters.py --before /tmp/plans_before.py \\
        [--backend postgresql|sqlite|both] [--rounds 9] [-n 300] [--plain 5] [--filtered 5]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.store.plans import Plan, run
from ustun.webhooks import endpoints as ops
from ustun.webhooks.adapters import plans
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.outbox import new_event
from webhooks import SECRET_KEY, drop_pg, pg_database

URL = "http://127.0.0.1:9/hook"
# What the filtered endpoints take: the events with an even amount (half of them).
FILTER = {"amount": {"$in": list(range(0, 100, 2))}, "currency": "EUR"}
EmitPlan = Callable[..., Plan[list[str]]]


def load_plans(path: str) -> ModuleType:
    """An older `plans.py`, as a module of its own beside the current one."""
    spec = importlib.util.spec_from_file_location("plans_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def add_endpoints(db: Database, account_id: str, n: int, **extra: Any) -> None:
    async with db.unit_of_work() as uow:
        for _ in range(n):
            await ops.create(uow, SecretBox(SECRET_KEY), account_id, url=URL, events=["*"], **extra)


def _event(account_id: str, i: int) -> dict[str, Any]:
    data = {"id": f"pay_{i}", "amount": i % 100, "currency": "EUR", "status": "pending"}
    return new_event(account_id, "payment.created", data)


async def one_round(db: Database, emit: EmitPlan, account_id: str, n: int) -> list[float]:
    """Wall and CPU µs per emit: each in its own commit, then all in one."""
    notify = not db.is_sqlite
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        async with db.unit_of_work() as uow:
            await run(emit(_event(account_id, i), None, notify=notify), uow.conn)
    figures = [(time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6]
    async with db.unit_of_work() as uow:
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            await run(emit(_event(account_id, i), None, notify=notify), uow.conn)
        figures += [(time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6]
    return figures


def line(label: str, rounds: list[list[float]]) -> str:
    m = [statistics.median(r[k] for r in rounds) for k in range(4)]
    return (
        f"  {label:28} commit each: {m[0]:5.0f} µs wall {m[1]:5.0f} µs CPU | "
        f"one commit: {m[2]:5.0f} µs wall {m[3]:5.0f} µs CPU  (per emit)"
    )


async def run_backend(backend: str, args: argparse.Namespace, before: ModuleType | None) -> None:
    pg_name = None
    if backend == "postgresql":
        pg_name, url = await pg_database()
    else:
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='ustun-emit-')) / 'bench.db'}"
    db = Database(url)
    try:
        await upgrade(db)
        account = await account_for_key(db, await create_key(db, "bench"))
        assert account is not None
        await add_endpoints(db, account.id, args.plain)
        ways: dict[str, EmitPlan] = {"after (this tree)": plans.emit}
        if before is not None:
            ways["before (--before)"] = before.emit
        rounds: dict[str, list[list[float]]] = {label: [] for label in ways}
        for emit in ways.values():  # warm up: statement caches, imports
            await one_round(db, emit, account.id, min(args.n, 50))
        for _ in range(args.rounds):
            for label, emit in ways.items():
                rounds[label].append(await one_round(db, emit, account.id, args.n))
        print(f"{backend}: {args.plain} endpoints without a filter")
        for label, found in rounds.items():
            print(line(label, found))
        await add_endpoints(db, account.id, args.filtered, filter=FILTER)
        filtered = [await one_round(db, plans.emit, account.id, args.n) for _ in range(args.rounds)]
        print(f"{backend}: and {args.filtered} more with a filter half the events pass")
        print(line("after (this tree)", filtered))
    finally:
        await db.dispose()
        if pg_name:
            await drop_pg(pg_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--before", help="an older plans.py to run side by side")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("-n", type=int, default=300, help="emits per round and way")
    parser.add_argument("--plain", type=int, default=5, help="endpoints without a filter")
    parser.add_argument("--filtered", type=int, default=5, help="endpoints with a filter")
    args = parser.parse_args()
    before = load_plans(args.before) if args.before else None
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    for backend in backends:
        asyncio.run(run_backend(backend, args, before))


if __name__ == "__main__":
    main()
