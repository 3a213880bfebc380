"""What one dispatcher claim costs PostgreSQL as a saturated endpoint's backlog grows.

Endpoint A is saturated (its `max_in_flight` deliveries are leased: in flight in some worker)
and has 0, 20,000, then 200,000 more due deliveries at the head of the due order; endpoint B
has 5 due deliveries. For each size it prints `EXPLAIN (ANALYZE, BUFFERS)` of the claim's two
statements, summed (in a transaction rolled back, so every size claims the same rows):
execution time, buffers touched, rows claimed.

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
from ustun.webhooks.adapters.postgres import _CLAIM as CLAIM  # the statements measured; repoint
from ustun.webhooks.adapters.postgres import _READY as READY  # here when the claim moves
from ustun.webhooks.adapters.postgres import PLAN_AND_COMMIT
from ustun.webhooks.store import PACING_HORIZON
from webhooks import drop_pg, pg_database

BATCH = 256  # the dispatcher's default batch (`dispatcher.DEFAULT_BATCH`)
SPARE = 5  # endpoint B's due deliveries
IN_FLIGHT = 8  # A's cap, all of it in flight


# A's deliveries in flight: leased by another worker until an hour from now.
_LEASE = """
UPDATE webhook_deliveries
SET lease_token = 'lease_busy', next_attempt_at = now() + interval '1 hour'
WHERE id IN (SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 LIMIT $2)
"""


def ready_args() -> tuple[Any, ...]:
    """The first statement's parameters as the dispatcher passes them: now, no endpoints to
    skip, the pacing horizon's end."""
    now = clock.now()
    return (now, [], now + PACING_HORIZON)


def claim_args(ready: list[str]) -> tuple[Any, ...]:
    """The second's: now, the locked endpoints, rows to take, the lease's end and token, the
    pacing horizon's end."""
    now = clock.now()
    return (now, ready, BATCH, now + timedelta(seconds=60), "lease_x", now + PACING_HORIZON)


def totals(node: dict[str, Any]) -> dict[str, int]:
    """Shared buffers hit and read by the plan's root node (it includes its children)."""
    return {key: node.get(f"Shared {key.title()} Blocks", 0) for key in ("hit", "read")}


async def explain(conn: asyncpg.Connection, text: bool) -> list[dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim's two statements, rolled back; the JSON plans,
    or the text ones."""
    form = "TEXT" if text else "JSON"
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(PLAN_AND_COMMIT)
        analyse = f"EXPLAIN (ANALYZE, BUFFERS, FORMAT {form})"
        first = await conn.fetch(f"{analyse} {READY}", *ready_args())
        ready = [row[0] for row in await conn.fetch(READY, *ready_args())]
        second = await conn.fetch(f"{analyse} {CLAIM}", *claim_args(ready))
    finally:
        await tx.rollback()
    if text:
        return [{"text": "\n".join(r[0] for r in rows)} for rows in (first, second)]
    return [json.loads(rows[0][0])[0] for rows in (first, second)]


async def measure(sizes: list[int], plans: bool) -> None:
    name, url = await pg_database()
    db = Database(url)
    try:
        account_id = await new_account(db)
        urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
        saturated, spare = await add_endpoints(db, account_id, urls, max_in_flight=IN_FLIGHT)
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await insert_backlog(conn, account_id, spare, SPARE, prefix="evt_b")
            await insert_backlog(conn, account_id, saturated, IN_FLIGHT, prefix="evt_f")
            await conn.execute(_LEASE, saturated, IN_FLIGHT)
            print(f"claim of up to {BATCH} rows; endpoint B has {SPARE} due, A is at its cap")
            print(f"{'A backlog':>10} {'exec ms':>8} {'plan ms':>8} {'hit':>7} {'read':>6} rows")
            loaded = 0
            for size in sizes:
                await insert_backlog(conn, account_id, saturated, size - loaded, f"e{size}_")
                loaded = size
                for _ in range(2):  # the first run warms the cache; print the second
                    both = await explain(conn, text=False)
                hit, read = (sum(totals(p["Plan"])[k] for p in both) for k in ("hit", "read"))
                run, planned = (
                    sum(p[k] for p in both) for k in ("Execution Time", "Planning Time")
                )
                print(
                    f"{size:>10,} {run:>8.2f} {planned:>8.2f} {hit:>7} {read:>6}"
                    f" {both[1]['Plan']['Actual Rows']}"
                )
                if plans:
                    print("\n".join(p["text"] for p in await explain(conn, text=True)))
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
