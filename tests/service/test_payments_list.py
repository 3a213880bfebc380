import httpx
from sqlalchemy import insert

from ustun import clock, ids
from ustun.service.plumbing.accounts import account_for_key
from ustun.service.resources.schema import payments
from ustun.store import Database
from ustun.store.tables import accounts


async def _account_of(db: Database, key: str) -> str:
    account = await account_for_key(db, key)
    assert account is not None
    return account.id


async def _add_payments(db: Database, account_id: str, n: int) -> list[str]:
    made = []
    async with db.unit_of_work() as uow:
        for i in range(n):
            now = clock.now()
            pid = ids.new_id("pay")
            await uow.conn.execute(
                insert(payments).values(
                    id=pid,
                    account_id=account_id,
                    amount=100 + i,
                    currency="EUR",
                    status="pending",
                    version=1,
                    created_at=now,
                    updated_at=now,
                )
            )
            made.append(pid)
    return made


async def test_lists_newest_first_in_pages(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    made = await _add_payments(db, await _account_of(db, api_key), 5)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        body = (await client.get("/v1/payments", params=params)).json()
        pages += 1
        seen += [p["id"] for p in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(made))
    first = (await client.get("/v1/payments", params={"limit": 1})).json()["data"][0]
    assert first["amount"] == 104
    assert first["currency"] == "EUR"
    assert first["status"] == "pending"
    assert first["created_at"].endswith("Z")


async def test_another_account_sees_none_of_them(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    await _add_payments(db, await _account_of(db, api_key), 2)
    other_id = ids.new_id("acct")
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            insert(accounts).values(id=other_id, name=other_id, created_at=clock.now())
        )
    await _add_payments(db, other_id, 3)
    body = (await client.get("/v1/payments", params={"limit": 100})).json()
    assert len(body["data"]) == 2
