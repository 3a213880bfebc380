"""What one dispatcher claim costs PostgreSQL as a saturated endpoint's backlog grows.

Endpoint A is saturated (the claim is told to skip it) and has 0, 20,000, then 200,000 due
deliveries at the head of the due order; endpoint B has 5 due deliveries. For each size it
prints `EXPLAIN (ANALYZE, BUFFERS)` of the claim (in a transaction rolled back, so every size
claims the same rows): execution time, buffers touched, rows claimed.

    .venv/bin/python benchmarks/claim_explain.py [--sizes 0,20000,200000] [--plans]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import timedelta
from typing import Any

import asyncpg

from backlog import add_endpoints, insert_backlog, new_account
from ustun import clock
from ustun.store import Database
from ustun.webhooks.adapters.common import SCAN_FACTOR
from ustun.webhooks.adapters.postgres import _CLAIM as CLAIM  # the statement measured; repoint here
from ustun.webhooks.adapters.postgres import CUSTOM_PLANS
from webhooks import drop_pg, pg_database

BATCH = 256  # the dispatcher's default batch (`dispatcher.DEFAULT_BATCH`)
SPARE = 5  # endpoint B's due deliveries


def claim_args(saturated: str) -> tuple[Any, ...]:
    """The claim's parameters as the dispatcher passes them: now, the endpoints it skips, rows
    to scan, rows to take, the lease's end and token."""
    now = clock.now()
    return (now, [saturated], BATCH * SCAN_FACTOR, BATCH, now + timedelta(seconds=60), "lease_x")


def totals(node: dict[str, Any]) -> dict[str, int]:
    """Shared buffers hit and read by the plan's root node (it includes its children)."""
    return {key: node.get(f"Shared {key.title()} Blocks", 0) for key in ("hit", "read")}


async def explain(conn: asyncpg.Connection, saturated: str, text: bool) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim, rolled back; the JSON plan, or the text one."""
    form = "TEXT" if text else "JSON"
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(CUSTOM_PLANS)
        rows = await conn.fetch(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT {form}) {CLAIM}", *claim_args(saturated)
        )
    finally:
        await tx.rollback()
    if text:
        return {"text": "\n".join(r[0] for r in rows)}
    plan: dict[str, Any] = json.loads(rows[0][0])[0]
    return plan


async def measure(sizes: list[int], plans: bool) -> None:
    name, url = await pg_database()
    db = Database(url)
    try:
        account_id = await new_account(db)
        urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
        saturated, spare = await add_endpoints(db, account_id, urls)
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await insert_backlog(conn, account_id, spare, SPARE, prefix="evt_b")
            print(f"claim of up to {BATCH} rows; endpoint B has {SPARE} due, A is skipped")
            print(f"{'A backlog':>10} {'exec ms':>8} {'plan ms':>8} {'hit':>7} {'read':>6} rows")
            loaded = 0
            for size in sizes:
                await insert_backlog(conn, account_id, saturated, size - loaded, f"e{size}_")
                loaded = size
                for _ in range(2):  # the first run warms the cache; print the second
                    plan = await explain(conn, saturated, text=False)
                buffers = totals(plan["Plan"])
                print(
                    f"{size:>10,} {plan['Execution Time']:>8.2f} {plan['Planning Time']:>8.2f}"
                    f" {buffers['hit']:>7} {buffers['read']:>6} {plan['Plan']['Actual Rows']}"
                )
                if plans:
                    print((await explain(conn, saturated, text=True))["text"])
        finally:
            await conn.close()
    finally:
        await db.dispose()
        await drop_pg(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,20000,200000", help="backlog sizes, ascending")
    parser.add_argument("--plans", action="store_true", help="also print each plan as text")
    args = parser.parse_args()
    asyncio.run(measure([int(s) for s in args.sizes.split(",")], args.plans))


if __name__ == "__main__":
    main()
