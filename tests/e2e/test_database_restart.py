"""PostgreSQL restarted (fast shutdown) under 25 POSTs/s: the requests it catches get 503 with
Retry-After, never a 500; every 201 is kept, each refused request succeeds when retried with
its key, and the server and its worker recover by themselves (every event is delivered)."""

from __future__ import annotations

import asyncio
import collections
import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from pg_cluster import Cluster
from support import FIRST_KEY, Server, wait_for
from webhook_support import Receiver, until

pytestmark = pytest.mark.e2e

RATE = 25  # POSTs a second
SECONDS = 6.0
RESTART_AT = 2.0


async def _post(http: httpx.AsyncClient, key: str, amount: int) -> httpx.Response:
    return await http.post(
        "/v1/payments",
        json={"amount": amount, "currency": "EUR"},
        headers={"idempotency-key": key},
    )


async def test_a_restart_under_load_answers_503_and_loses_nothing(tmp_path: Path) -> None:
    cluster = Cluster().start()
    receiver = await Receiver().start()
    server = Server(
        cluster.url,
        tmp_path / "serve.log",
        USTUN_WEBHOOK_ALLOW_PRIVATE="1",
        USTUN_WEBHOOK_RETRY_SCHEDULE="0.5,1,2,4",
    )
    try:
        server.start()
        api_key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the key").group()
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"authorization": f"Bearer {api_key}"}, timeout=30
        ) as http:
            hook = await http.post(
                "/v1/webhook-endpoints", json={"url": receiver.url(), "events": ["payment.*"]}
            )
            assert hook.status_code == 201, hook.text

            answers: dict[str, httpx.Response] = {}

            async def one(n: int) -> None:
                key = str(uuid.uuid4())
                answers[key] = await _post(http, key, 100 + n)

            restart = None
            requests = []
            loop = asyncio.get_running_loop()
            started = loop.time()
            for n in range(int(RATE * SECONDS)):
                requests.append(asyncio.create_task(one(n)))
                if restart is None and loop.time() - started >= RESTART_AT:
                    restart = asyncio.create_task(asyncio.to_thread(cluster.restart))
                await asyncio.sleep(1 / RATE)
            assert restart is not None
            await asyncio.gather(restart, *requests)

            statuses = collections.Counter(r.status_code for r in answers.values())
            assert set(statuses) <= {201, 503}, statuses
            refused = [k for k, r in answers.items() if r.status_code == 503]
            assert refused, f"no request met the restart: {statuses}"
            for key in refused:
                slug = answers[key].json()["type"].rsplit("/", 1)[1]
                assert slug in ("database-unavailable", "database-busy")
                assert float(answers[key].headers["retry-after"]) > 0

            # Each refused request, retried with its key, succeeds (or replays, if it committed).
            amounts = {key: json.loads(r.request.content)["amount"] for key, r in answers.items()}
            for key in refused:
                retried = await _post(http, key, amounts[key])
                assert retried.status_code == 201, retried.text
                answers[key] = retried
            paid = {r.json()["id"] for r in answers.values()}
            assert len(paid) == len(answers)

        conn = await asyncpg.connect(cluster.url)
        try:
            stored = {row["id"] for row in await conn.fetch("SELECT id FROM payments")}
        finally:
            await conn.close()
        assert stored == paid, "a 201 was lost, or a payment was made twice"

        def delivered() -> set[Any]:
            return {json.loads(body)["data"]["id"] for body in receiver.bodies()}

        async def all_delivered() -> bool:
            return delivered() >= paid

        await until(all_delivered, within=60, what="every payment's event, after the restart")
        assert server.alive()
        log = server.output()
        assert "unhandled error" not in log
        assert "Exception in ASGI application" not in log
    finally:
        if server.proc is not None:
            server.stop()
        await receiver.stop()
        cluster.stop()
