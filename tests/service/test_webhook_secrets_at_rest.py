"""Signing secrets never rest in clear: not in endpoints, not in stored idempotent answers."""

from __future__ import annotations

import base64
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import trustme
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import Row, select
from sqlalchemy.engine import make_url

from dashboard_support import SECRET, create_endpoint, log_in
from tls_support import client_pems
from ustun import clock
from ustun.http.signature import SigningKey
from ustun.keys import secret_box
from ustun.service.runtime import secret_keys
from ustun.settings import Settings, reveal
from ustun.store import Database
from ustun.webhooks import endpoints as ops
from ustun.webhooks.secretbox import SecretBox, SecretKeyError, master_key
from ustun.webhooks.tables import endpoints

HOOK = "https://hooks.example.com/ustun"
ED25519 = {"url": HOOK, "signature": "ed25519"}


@pytest.fixture
def database_url(own_database_url: str) -> str:
    """A database of this test's own, so that the whole of it can be searched."""
    return own_database_url


async def everything_stored(database_url: str) -> bytes:
    """Every byte the database holds: the SQLite file and its WAL, or every PostgreSQL row."""
    url = make_url(database_url)
    if url.drivername.startswith("sqlite"):
        assert url.database is not None
        files = [Path(url.database), Path(url.database + "-wal")]
        return b"".join(f.read_bytes() for f in files if f.exists())
    conn = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(False))
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        dumped = []
        for table in tables:
            for row in await conn.fetch(f'SELECT * FROM "{table["table_name"]}"'):
                dumped += [v if isinstance(v, bytes) else str(v).encode() for v in row.values()]
        assert tables
        assert dumped
        return b"\n".join(dumped)
    finally:
        await conn.close()


async def test_created_and_rotated_secrets_replay_but_never_rest_in_clear(
    app: FastAPI, api_key: str, database_url: str
) -> None:
    transport = httpx.ASGITransport(app=app)
    auth = {"authorization": f"Bearer {api_key}"}
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://t", headers=auth) as api,
        httpx.AsyncClient(transport=transport, base_url="http://t") as browser,
    ):
        create = {"idempotency-key": str(uuid.uuid4())}
        made = await api.post("/v1/webhook-endpoints", json={"url": HOOK}, headers=create)
        again = await api.post("/v1/webhook-endpoints", json={"url": HOOK}, headers=create)
        rotate = {"idempotency-key": str(uuid.uuid4())}
        path = f"{made.headers['location']}/rotate-secret"
        rotated = await api.post(path, headers=rotate)
        rotated_again = await api.post(path, headers=rotate)
        for first, replay in ((made, again), (rotated, rotated_again)):
            assert first.status_code == replay.status_code, first.text
            assert replay.json()["secret"] == first.json()["secret"]
            assert replay.headers["idempotent-replayed"] == "true"
            assert first.headers["cache-control"] == replay.headers["cache-control"] == "no-store"
            assert replay.headers["etag"] == first.headers["etag"]
        assert len((await api.get("/v1/webhook-endpoints")).json()["data"]) == 1

        csrf = await log_in(browser, api_key)
        shown_on_create = await browser.post(
            "/dashboard/endpoints", data={"csrf_token": csrf, "url": HOOK, "events": "*"}
        )
        endpoint_id, dashboard_secret = await create_endpoint(browser, csrf, HOOK)
        shown_on_rotate = await browser.post(
            f"/dashboard/endpoints/{endpoint_id}/rotate", data={"csrf_token": csrf}
        )
        for shown in (shown_on_create, shown_on_rotate):
            assert SECRET.search(shown.text), shown.text
            assert shown.headers["cache-control"] == "no-store"
        assert "no-store" not in (await browser.get("/dashboard/endpoints")).headers.get(
            "cache-control", ""
        )

        stored = await everything_stored(database_url)
    secrets = [made.json()["secret"], rotated.json()["secret"], dashboard_secret]
    secrets.append(SECRET.search(shown_on_rotate.text).group())  # type: ignore[union-attr]
    assert stored.count(b"whsec_") == 0
    for secret in secrets:
        assert secret.removeprefix("whsec_").encode() not in stored


NEW_SECRET_KEY = "a-brand-new-secret-key-0123456789abcdef"


async def endpoint_row(db: Database, endpoint_id: str) -> Row[Any]:
    """The endpoint's stored row, as it rests in the table."""
    async with db.read() as conn:
        return (await conn.execute(select(endpoints).where(endpoints.c.id == endpoint_id))).one()


async def rotate_key(db: Database, settings: Settings) -> Settings:
    """`ustun rotate-key` to `NEW_SECRET_KEY`, the current key kept as the previous one; the
    settings after it."""
    current = master_key(reveal(settings.secret_key), settings.database_url)
    moved = settings.model_copy(
        update={
            "secret_key": SecretStr(NEW_SECRET_KEY),
            "secret_key_previous": SecretStr(current),
        }
    )
    await secret_keys.reseal(db, secret_box(moved), moved)
    return moved


async def test_the_private_key_is_sealed_at_rest_and_rotate_key_reseals_it(
    client: httpx.AsyncClient, db: Database, settings: Settings
) -> None:
    made = (await client.post("/v1/webhook-endpoints", json=ED25519)).json()
    await client.post(f"/v1/webhook-endpoints/{made['id']}/rotate-secret")
    box = secret_box(settings)
    row = await endpoint_row(db, made["id"])
    keys = ops.signing_secrets(box, row, clock.now())
    assert len(keys) == 2
    assert all(isinstance(k, SigningKey) for k in keys)
    for key in keys:
        for sealed in (row.secret, row.previous_secret):
            assert "whsk_" not in sealed
            assert base64.b64encode(key.key).decode() not in sealed
            assert key.key not in base64.b64decode(sealed)

    moved = await rotate_key(db, settings)
    resealed = await endpoint_row(db, made["id"])
    assert resealed.secret != row.secret
    later = clock.now() + timedelta(seconds=1)
    assert ops.signing_secrets(secret_box(moved), resealed, later) == keys
    with pytest.raises(SecretKeyError):
        box.open(resealed.secret, context=made["id"])


BROKER_PASSWORD = "broker-pw-0f9e8d7c"
BROKER_URL = f"amqps://ustun:{BROKER_PASSWORD}@broker.example.com/payments"


async def test_a_broker_url_is_never_returned_rests_sealed_and_rotate_key_reseals_it(
    app: FastAPI, api_key: str, db: Database, settings: Settings, database_url: str
) -> None:
    auth = {"authorization": f"Bearer {api_key}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=auth) as api:
        body = {"kind": "rabbitmq", "url": BROKER_URL, "exchange": "events"}
        made = await api.post("/v1/webhook-endpoints", json=body)
        assert made.status_code == 201, made.text
        path = made.headers["location"]
        patched = await api.patch(
            path, json={"url": BROKER_URL + "2"}, headers={"if-match": made.headers["etag"]}
        )
        answers = [patched, await api.get(path), await api.get("/v1/webhook-endpoints")]
        for answer in (made, *answers):
            assert answer.status_code == (201 if answer is made else 200), answer.text
            assert BROKER_PASSWORD not in answer.text
        assert patched.json()["url"] == "amqps://broker.example.com/payments2"
        stored = await everything_stored(database_url)
    assert BROKER_PASSWORD.encode() not in stored

    box = secret_box(settings)
    row = await endpoint_row(db, made.json()["id"])
    assert ops.destination(box, row) is not None
    assert ops.destination(box, row).url == BROKER_URL + "2"  # type: ignore[union-attr]
    await rotate_key(db, settings)
    resealed = await endpoint_row(db, row.id)
    assert ops.destination(SecretBox(NEW_SECRET_KEY), resealed) == (ops.destination(box, row))
    with pytest.raises(SecretKeyError):
        box.open(resealed.broker_url, context=row.id)


async def test_a_client_key_and_an_oauth2_secret_rest_sealed_and_rotate_key_reseals_them(
    client: httpx.AsyncClient, db: Database, settings: Settings, database_url: str
) -> None:
    pems = client_pems(trustme.CA())
    oauth2 = {
        "token_url": "https://auth.example.com/token",
        "client_id": "ustun",
        "client_secret": "oauth2-secret-3c9b1f",
    }
    made = await client.post(
        "/v1/webhook-endpoints", json={"url": HOOK, "mtls": pems, "oauth2": oauth2}
    )
    assert made.status_code == 201, made.text
    stored = await everything_stored(database_url)
    key_body = "".join(pems["private_key"].splitlines()[1:-1])
    assert key_body[:40].encode() not in stored
    assert b"oauth2-secret-3c9b1f" not in stored

    box = secret_box(settings)
    row = await endpoint_row(db, made.json()["id"])
    cert, creds = ops.client_certificate(box, row), ops.oauth2_credentials(box, row)
    assert cert is not None
    assert cert.private_key == pems["private_key"]
    assert creds is not None
    assert creds.client_secret == "oauth2-secret-3c9b1f"
    await rotate_key(db, settings)
    resealed = await endpoint_row(db, row.id)
    moved = SecretBox(NEW_SECRET_KEY)
    assert resealed.mtls_key != row.mtls_key
    assert ops.client_certificate(moved, resealed) == cert
    assert ops.oauth2_credentials(moved, resealed) == creds
    with pytest.raises(SecretKeyError):
        box.open(resealed.oauth2_secret, context=row.id)
