"""kill -9 a `ustun worker` mid-batch: every claimed delivery is delivered after its lease."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from support import UstunProcess, new_account
from ustun.store import Database
from ustun.store.migrate import upgrade
from ustun.webhooks import endpoints as ops
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import deliveries
from webhook_support import Receiver, sleep, until

TEST_KEY = "test-only-secret-key-0123456789abcdef"
EVENTS = 30
ENV = {
    "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
    "USTUN_WEBHOOK_TIMEOUT": "1.5",
    "USTUN_WEBHOOK_LEASE": "3",
    "USTUN_WEBHOOK_RETRY_SCHEDULE": "0.2,0.4,0.8",
    "USTUN_SECRET_KEY": TEST_KEY,
}


async def _statuses(db: Database) -> list[tuple[str, str | None]]:
    async with db.read() as conn:
        rows = await conn.execute(select(deliveries.c.status, deliveries.c.lease_token))
        return [(r.status, r.lease_token) for r in rows]


async def test_killed_worker_loses_nothing(empty_database_url: str, tmp_path: Path) -> None:
    db = Database(empty_database_url)
    await upgrade(db)
    receiver = await Receiver().start()
    # The first worker's sends hang (1 s each), so it is killed with a batch in flight.
    receiver.script["/hook"] = [sleep(1.0)] * 8
    try:
        account_id = await new_account(db, "crash")
        async with db.unit_of_work() as uow:
            await ops.create(uow, SecretBox(TEST_KEY), account_id, url=receiver.url(), events=["*"])
            sent = [await emit(uow, account_id, "payment.created", {"n": i}) for i in range(EVENTS)]

        env = {"USTUN_DATABASE_URL": empty_database_url, **ENV}
        first = UstunProcess(["worker"], env, tmp_path / "first.log").start()

        async def busy() -> bool:
            assert first.alive(), first.output()
            return len(receiver.received) >= 4

        await until(busy, within=30, what="the first worker to start sending")
        first.kill()
        held = [s for s in await _statuses(db) if s[1] is not None]
        assert held, "the killed worker should have left claimed deliveries behind"

        second = UstunProcess(["worker"], env, tmp_path / "second.log").start()
        try:

            async def all_delivered() -> bool:
                return all(s == "succeeded" for s, _ in await _statuses(db))

            await until(all_delivered, within=40, what="every delivery after the lease")
        finally:
            assert second.stop() == 0, second.output()
        got = {json.loads(b)["id"] for b in receiver.bodies()}
        assert got == set(sent)
    finally:
        await receiver.stop()
        await db.dispose()
