"""The service keys its idempotency fingerprints with a key derived from USTUN_SECRET_KEY, so a
secret in a request body cannot be confirmed from the database (both backends)."""

from __future__ import annotations

import hashlib
import json
import os
import uuid

import httpx
from sqlalchemy import select

from support import problem_of
from ustun.http.fingerprint import KEYED_PREFIX, canonical_json, fingerprint
from ustun.idempotency.tables import idempotency_records
from ustun.keys import FINGERPRINT_KEY_INFO
from ustun.store import Database
from ustun.webhooks.secretbox import derive_key

PASSWORD = "hunter2-correct-horse"


async def _post(client: httpx.AsyncClient, body: dict[str, object], key: str) -> httpx.Response:
    headers = {"idempotency-key": key, "content-type": "application/json"}
    return await client.post("/v1/payments", content=json.dumps(body), headers=headers)


async def test_the_stored_fingerprint_is_an_hmac_under_a_key_not_in_the_database(
    client: httpx.AsyncClient, db: Database
) -> None:
    key = uuid.uuid4().hex
    body = {"amount": 5, "currency": "EUR", "description": f"broker password {PASSWORD}"}
    raw = json.dumps(body).encode()
    first = await _post(client, body, key)
    assert first.status_code == 201, first.text
    async with db.read() as conn:
        stored = await conn.scalar(
            select(idempotency_records.c.fingerprint).where(idempotency_records.c.key == key)
        )
    canonical = canonical_json(raw)
    assert canonical is not None
    unkeyed = {
        fingerprint("POST", "/v1/payments", b"", raw),
        hashlib.sha256(raw).hexdigest(),
        hashlib.sha256(canonical).hexdigest(),
    }
    assert stored.startswith(KEYED_PREFIX)
    assert stored not in unkeyed
    secret = derive_key(os.environ["USTUN_SECRET_KEY"], FINGERPRINT_KEY_INFO)
    assert stored == fingerprint("POST", "/v1/payments", b"", raw, key=secret)

    again = await _post(client, body, key)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    other = await _post(client, {**body, "description": "broker password guess"}, key)
    problem_of(other, 422, "idempotency-key-reused")
