"""A database outage met while serving is a 503 or 507 problem with Retry-After, never a 500:
down or unreachable, a statement or lock wait past its timeout; and /metrics still answers."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import httpx

from support import free_port
from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database


async def test_an_unreachable_database_is_a_503_with_retry_after() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    app = create_app(Settings(database_url=url))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        # Authentication reads the key from the database: the outage is met there.
        response = await http.post(
            "/v1/payments",
            json={"amount": 100, "currency": "EUR"},
            headers={"authorization": "Bearer ustun_sk_" + "x" * 43, "idempotency-key": "k1"},
        )
        assert response.status_code == 503, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["retry-after"] == "2"
        assert response.headers["x-request-id"]
        assert response.json()["type"].endswith("/problems/database-unavailable")

        metrics = await http.get("/metrics")
        assert metrics.status_code == 200
        assert "ustun_database_up 0.0" in metrics.text
        assert 'ustun_database_refusals_total{outage="unavailable"} 1.0' in metrics.text
        assert (await http.get("/healthz")).json() == {"status": "ok"}


async def test_a_transfer_past_the_lock_timeout_is_a_503_and_its_retry_succeeds(
    postgresql_url: str,
) -> None:
    """A row held by another transaction past USTUN_LOCK_TIMEOUT: 503 `database-busy`,
    nothing moved; the same request with the same key succeeds once the row is free."""
    db = Database(postgresql_url, lock_timeout=0.2)
    app = create_app(Settings(database_url=postgresql_url, lock_timeout=0.2), db=db)
    api_key = await create_key(db, f"outage-{uuid.uuid4().hex[:12]}")
    blocker = await asyncpg.connect(postgresql_url)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport,
                base_url="http://t",
                headers={"authorization": f"Bearer {api_key}"},
            ) as http:
                ledgers = [
                    (
                        await http.post(
                            "/v1/ledger-accounts", json={"currency": "EUR", "balance": 500}
                        )
                    ).json()["id"]
                    for _ in range(2)
                ]
                body = {"from": ledgers[0], "to": ledgers[1], "amount": 100, "currency": "EUR"}
                key = {"idempotency-key": str(uuid.uuid4())}
                async with blocker.transaction():
                    await blocker.execute(
                        "SELECT 1 FROM ledger_accounts WHERE id = $1 FOR UPDATE", ledgers[0]
                    )
                    refused = await asyncio.wait_for(
                        http.post("/v1/transfers", json=body, headers=key), 10
                    )
                assert refused.status_code == 503, refused.text
                assert refused.json()["type"].endswith("/problems/database-busy")
                assert refused.headers["retry-after"] == "1"
                balance = (await http.get(f"/v1/ledger-accounts/{ledgers[0]}")).json()["balance"]
                assert balance == 500

                retried = await http.post("/v1/transfers", json=body, headers=key)
                assert retried.status_code == 201, retried.text
                replayed = await http.post("/v1/transfers", json=body, headers=key)
                assert replayed.headers["idempotent-replayed"] == "true"
                balance = (await http.get(f"/v1/ledger-accounts/{ledgers[0]}")).json()["balance"]
                assert balance == 400
    finally:
        await blocker.close()
        await db.dispose()
