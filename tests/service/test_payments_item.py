"""`GET` and `PATCH /v1/payments/{id}`: ETag / 304, If-Match required, state rules (409 ≠ 412)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import insert, select

from ustun import clock, ids
from ustun.service.plumbing.accounts import create_key, hash_key
from ustun.service.resources.schema import payments
from ustun.store import Database
from ustun.store.tables import api_keys


async def _payment(db: Database, key: str, status: str = "pending") -> str:
    async with db.unit_of_work() as uow:
        account_id = await uow.conn.scalar(
            select(api_keys.c.account_id).where(api_keys.c.key_hash == hash_key(key))
        )
        now = clock.now()
        payment_id = ids.new_id("pay")
        await uow.conn.execute(
            insert(payments).values(
                id=payment_id,
                account_id=account_id,
                amount=1250,
                currency="EUR",
                status=status,
                version=1,
                created_at=now,
                updated_at=now,
            )
        )
    return f"/v1/payments/{payment_id}"


def _problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    assert str(body["type"]).endswith(f"/problems/{slug}")
    return body


async def test_get_has_an_etag_and_answers_304(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    url = await _payment(db, api_key)
    got = await client.get(url)
    assert got.status_code == 200
    assert got.json()["id"] == url.rsplit("/", 1)[1]
    assert got.json()["status"] == "pending"
    assert got.headers["etag"] == '"1"'
    for value in ('"1"', 'W/"1"', '"0", "1"', "*"):
        cached = await client.get(url, headers={"if-none-match": value})
        assert cached.status_code == 304
        assert cached.headers["etag"] == '"1"'
    assert (await client.get(url, headers={"if-none-match": '"2"'})).status_code == 200


async def test_another_accounts_payment_is_404(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    url = await _payment(db, api_key)
    other = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    auth = {"authorization": f"Bearer {other}"}
    _problem(await client.get(url, headers=auth), 404, "not-found")
    patched = await client.patch(
        url, json={"status": "cancelled"}, headers={**auth, "if-match": '"1"'}
    )
    _problem(patched, 404, "not-found")
    _problem(await client.get("/v1/payments/pay_nope"), 404, "not-found")


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
async def test_patch_settles_a_pending_payment(
    client: httpx.AsyncClient, db: Database, api_key: str, status: str
) -> None:
    url = await _payment(db, api_key)
    patched = await client.patch(url, json={"status": status}, headers={"if-match": '"1"'})
    assert patched.status_code == 200, patched.text
    assert patched.json()["status"] == status
    assert patched.headers["etag"] == '"2"'
    assert patched.json()["updated_at"] >= patched.json()["created_at"]
    assert (await client.get(url)).json()["status"] == status


async def test_patch_requires_if_match(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    url = await _payment(db, api_key)
    problem = _problem(
        await client.patch(url, json={"status": "failed"}), 428, "precondition-required"
    )
    assert problem["header"] == "If-Match"
    assert (await client.get(url)).json()["status"] == "pending"


async def test_stale_version_is_412_and_a_settled_payment_is_409(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    url = await _payment(db, api_key)
    await client.patch(url, json={"status": "succeeded"}, headers={"if-match": '"1"'})
    stale = await client.patch(url, json={"status": "cancelled"}, headers={"if-match": '"1"'})
    _problem(stale, 412, "precondition-failed")
    current = await client.patch(url, json={"status": "cancelled"}, headers={"if-match": '"2"'})
    problem = _problem(current, 409, "state-conflict")
    assert problem["current_status"] == "succeeded"
    assert "pending" in str(problem["detail"])
    star = await client.patch(url, json={"status": "failed"}, headers={"if-match": "*"})
    _problem(star, 409, "state-conflict")
    assert (await client.get(url)).headers["etag"] == '"2"'


@pytest.mark.parametrize(
    "body",
    [
        {"status": "pending"},
        {"status": "refunded"},
        {"status": 1},
        {},
        {"status": "failed", "amount": 1},
    ],
)
async def test_patch_rejects_other_changes_with_422(
    client: httpx.AsyncClient, db: Database, api_key: str, body: dict[str, object]
) -> None:
    url = await _payment(db, api_key)
    response = await client.patch(url, json=body, headers={"if-match": '"1"'})
    _problem(response, 422, "validation-error")


async def test_patch_accepts_merge_patch_and_refuses_other_media_types(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    url = await _payment(db, api_key)
    refused = await client.patch(
        url, content=b"status=failed", headers={"if-match": '"1"', "content-type": "text/plain"}
    )
    _problem(refused, 415, "unsupported-media-type")
    merged = await client.patch(
        url,
        content=b'{"status": "failed"}',
        headers={"if-match": '"1"', "content-type": "application/merge-patch+json"},
    )
    assert merged.status_code == 200
