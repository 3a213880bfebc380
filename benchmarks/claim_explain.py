"""What one dispatcher claim costs PostgreSQL as a saturated endpoint's backlog grows.

Endpoint A is saturated (its `max_in_flight` deliveries are leased: in flight in some worker)
and has 0, 20,000, then 200,000 more due deliveries at the head of the due order; endpoint B
has 5 due deliveries. For each size it prints the plans of the claim function's two statements
as PostgreSQL's `auto_explain` reports them (ANALYZE, BUFFERS; nested statements, sent to this
client), summed (in a transaction rolled back, so every size claims the same rows): execution
time, buffers touched, rows claimed. Needs a superuser (`LOAD 'auto_explain'`).

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
from ustun.defaults import DEFAULT_WEBHOOK_CLAIM_BATCH
from ustun.store import Database
from ustun.webhooks.adapters.postgres import CLAIM
from ustun.webhooks.store import PACING_HORIZON
from webhooks import drop_pg, pg_database

BATCH = DEFAULT_WEBHOOK_CLAIM_BATCH
SPARE = 5  # endpoint B's due deliveries
IN_FLIGHT = 8  # A's cap, all of it in flight


# A's deliveries in flight: leased by another worker until an hour from now.
_LEASE = """
UPDATE webhook_deliveries
SET lease_token = 'lease_busy', next_attempt_at = now() + interval '1 hour'
WHERE id IN (SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 LIMIT $2)
"""


# Every statement's plan, with its buffers and actual times, logged to this client as well.
_AUTO_EXPLAIN = """
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_nested_statements = on;
SET client_min_messages = log;
"""


def claim_args() -> tuple[Any, ...]:
    """The claim's parameters as the dispatcher passes them: now, no endpoints to skip (ids
    joined by spaces), the pacing horizon's end, rows to take, the lease's end and token, none
    finished."""
    now = clock.now()
    return (now, "", now + PACING_HORIZON, BATCH, now + timedelta(seconds=60), "lease_x", "")


def totals(node: dict[str, Any]) -> dict[str, int]:
    """Shared buffers hit and read by the plan's root node (it includes its children)."""
    return {key: node.get(f"Shared {key.title()} Blocks", 0) for key in ("hit", "read")}


async def explain(conn: asyncpg.Connection, text: bool) -> list[dict[str, Any]]:
    """The plans of the claim function's two statements, rolled back; as JSON, or as text."""
    logged: list[str] = []

    def listen(_conn: Any, message: Any) -> None:
        logged.append(message.message.split("plan:\n", 1)[-1])

    conn.add_log_listener(listen)
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(f"SET LOCAL auto_explain.log_format = {'text' if text else 'json'}")
        await conn.fetch(CLAIM, *claim_args())
    finally:
        await tx.rollback()
        conn.remove_log_listener(listen)
    # The function's statements that read the deliveries: not its settings, not the call.
    statements = [m for m in logged if "webhook_deliveries" in m and "ustun_claim" not in m]
    if text:
        return [{"text": m} for m in statements]
    return [json.loads(m) for m in statements]


async def measure(sizes: list[int], plans: bool) -> None:
    name, url = await pg_database()
    db = Database(url)
    try:
        account_id = await new_account(db)
        urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
        saturated, spare = await add_endpoints(db, account_id, urls, max_in_flight=IN_FLIGHT)
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        await conn.execute(_AUTO_EXPLAIN)
        try:
            await insert_backlog(conn, account_id, spare, SPARE, prefix="evt_b")
            await insert_backlog(conn, account_id, saturated, IN_FLIGHT, prefix="evt_f")
            await conn.execute(_LEASE, saturated, IN_FLIGHT)
            print(f"claim of up to {BATCH} rows; endpoint B has {SPARE} due, A is at its cap")
            print(f"{'A backlog':>10} {'exec ms':>8} {'hit':>7} {'read':>6} rows")
            loaded = 0
            for size in sizes:
                await insert_backlog(conn, account_id, saturated, size - loaded, f"e{size}_")
                loaded = size
                for _ in range(2):  # the first run warms the cache; print the second
                    both = await explain(conn, text=False)
                hit, read = (sum(totals(p["Plan"])[k] for p in both) for k in ("hit", "read"))
                run = sum(p["Plan"]["Actual Total Time"] for p in both)
                print(
                    f"{size:>10,} {run:>8.2f} {hit:>7} {read:>6} {both[1]['Plan']['Actual Rows']}"
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
