"""Keyed fingerprints: a secret inside a body cannot be confirmed from the record store without
the key, on every store; records stored unkeyed or under the previous key still match."""

from __future__ import annotations

import hashlib
import json

import httpx

from idempotency.test_middleware import build_app, client_for, key
from ustun.http.fingerprint import KEYED_PREFIX, canonical_json, fingerprint
from ustun.idempotency import Found, RecordStore

PASSWORD = "hunter2-correct-horse"
BODY = {"name": f"amqp://relay:{PASSWORD}@broker.example.com/"}
KEY = b"k" * 32
OLD_KEY = b"o" * 32


async def _stored(store: RecordStore, scope: str, idempotency_key: str) -> str:
    found = await store.claim(scope, idempotency_key, "-", lease=30, ttl=60)
    assert isinstance(found, Found)
    return found.record.fingerprint


def _unkeyed_forms(body: bytes) -> set[str]:
    """Every hash of the request anyone could compute without the key."""
    canonical = canonical_json(body)
    assert canonical is not None
    return {
        fingerprint("POST", "/items", b"", body),
        hashlib.sha256(body).hexdigest(),
        hashlib.sha256(canonical).hexdigest(),
    }


async def _post(http: httpx.AsyncClient, body: object, idempotency_key: str) -> httpx.Response:
    headers = {**key(idempotency_key), "content-type": "application/json"}
    return await http.post("/items", content=json.dumps(body), headers=headers)


async def test_the_stored_fingerprint_is_keyed_and_still_tells_requests_apart(
    record_store: RecordStore, scope: str
) -> None:
    app, runs = build_app(record_store, fingerprint_key=KEY)
    async with client_for(app, scope) as http:
        first = await _post(http, BODY, "a")
        stored = await _stored(record_store, scope, "a")
        again = await http.post("/items", json=BODY, headers=key("a"))  # re-serialised
        other = await _post(http, {"name": "amqp://relay:guess@broker.example.com/"}, "a")
    assert stored.startswith(KEYED_PREFIX)
    assert stored not in _unkeyed_forms(json.dumps(BODY).encode())
    assert stored == fingerprint("POST", "/items", b"", json.dumps(BODY).encode(), key=KEY)
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422
    assert other.json()["type"].endswith("/problems/idempotency-key-reused")
    assert runs["items"] == 1


async def test_a_record_stored_before_the_key_still_answers_its_retry(
    record_store: RecordStore, scope: str
) -> None:
    """An upgrade: the first request was fingerprinted unkeyed, its retry comes to an app with a
    key."""
    before, runs = build_app(record_store)
    async with client_for(before, scope) as http:
        assert (await _post(http, BODY, "u")).status_code == 201
        assert (await _post(http, BODY, "r")).status_code == 201
    assert await _stored(record_store, scope, "u") in _unkeyed_forms(json.dumps(BODY).encode())
    after, runs_after = build_app(record_store, fingerprint_key=KEY)
    async with client_for(after, scope) as http:
        retry = await _post(http, BODY, "u")
        other = await _post(http, {"name": "else"}, "r")
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422
    assert runs["items"] == 2
    assert runs_after["items"] == 0


async def test_a_record_stored_under_the_previous_key_matches_during_a_rotation(
    record_store: RecordStore, scope: str
) -> None:
    old, runs = build_app(record_store, fingerprint_key=OLD_KEY)
    async with client_for(old, scope) as http:
        assert (await _post(http, BODY, "p")).status_code == 201
        assert (await _post(http, BODY, "q")).status_code == 201
    rotating, runs_rotating = build_app(
        record_store, fingerprint_key=KEY, previous_fingerprint_key=OLD_KEY
    )
    async with client_for(rotating, scope) as http:
        retry = await _post(http, BODY, "p")
        other = await _post(http, {"name": "else"}, "p")
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422
    # Once the previous key is gone its fingerprints cannot be checked: the key's retry replays
    # (as `ustun rotate-key` promises for stored answers), and nothing runs twice.
    rotated, runs_rotated = build_app(record_store, fingerprint_key=KEY)
    async with client_for(rotated, scope) as http:
        after = await _post(http, BODY, "q")
        unchecked = await _post(http, {"name": "else"}, "q")
    assert after.status_code == unchecked.status_code == 201
    assert after.content == unchecked.content
    assert unchecked.headers["idempotent-replayed"] == "true"
    assert runs["items"] == 2
    assert runs_rotating["items"] == runs_rotated["items"] == 0
