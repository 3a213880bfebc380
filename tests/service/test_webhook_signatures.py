"""Endpoints that sign with ed25519 (`v1a`): the API shape, delivery, rotation, keys at rest."""

from __future__ import annotations

import httpx
import pytest

from ustun.errors import InvalidSignature
from ustun.http.signature import SigningKey
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import verify
from webhook_support import Receiver, serving, until

HOOK = "https://hooks.example.com/ustun"
ED25519 = {"url": HOOK, "signature": "ed25519"}


async def test_an_ed25519_endpoint_shows_its_public_key_and_never_a_secret(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/v1/webhook-endpoints", json=ED25519)
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["signature"] == "ed25519"
    assert body["public_key"].startswith("whpk_")
    assert body["secret"] is None
    assert "whsk_" not in made.text
    got = (await client.get(made.headers["location"])).json()
    assert (got["signature"], got["public_key"]) == ("ed25519", body["public_key"])

    rotated = await client.post(f"{made.headers['location']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.headers["cache-control"] == "no-store"
    assert rotated.json()["public_key"].startswith("whpk_")
    assert rotated.json()["public_key"] != body["public_key"]
    assert rotated.json()["secret"] is None

    hmac = (await client.post("/v1/webhook-endpoints", json={"url": HOOK})).json()
    assert (hmac["signature"], hmac["public_key"]) == ("hmac-sha256", None)
    assert hmac["secret"].startswith("whsec_")


@pytest.mark.parametrize(
    ("method", "payload"),
    [("POST", {"url": HOOK, "signature": "rsa"}), ("PATCH", {"signature": "ed25519"})],
)
async def test_the_scheme_is_chosen_once_from_the_two(
    client: httpx.AsyncClient, method: str, payload: dict[str, str]
) -> None:
    made = (await client.post("/v1/webhook-endpoints", json={"url": HOOK})).json()
    path = "/v1/webhook-endpoints" + ("" if method == "POST" else f"/{made['id']}")
    refused = await client.request(method, path, json=payload)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "body.signature"


async def test_deliveries_are_signed_v1a_and_rotation_signs_with_both_keys(
    settings: Settings, db: Database, api_key: str
) -> None:
    receiver = await Receiver().start()
    try:
        async with serving(settings, db, api_key) as client:
            made = (
                await client.post(
                    "/v1/webhook-endpoints", json={"url": receiver.url(), "signature": "ed25519"}
                )
            ).json()
            base = f"/v1/webhook-endpoints/{made['id']}"
            await client.post(f"{base}/test")
            await until(lambda: _count(receiver, 1), what="the first ping")
            first = receiver.received[0]
            assert first.headers["webhook-signature"].startswith("v1a,")
            assert verify(made["public_key"], first.headers, first.body)["type"] == "ping"
            with pytest.raises(InvalidSignature):
                verify(str(SigningKey.generate().public_key), first.headers, first.body)

            rotated = (await client.post(f"{base}/rotate-secret")).json()
            await client.post(f"{base}/test")
            await until(lambda: _count(receiver, 2), what="the ping after the rotation")
            second = receiver.received[1]
            assert [s[:4] for s in second.headers["webhook-signature"].split(" ")] == [
                "v1a,",
                "v1a,",
            ]
            for public_key in (made["public_key"], rotated["public_key"]):
                verify(public_key, second.headers, second.body)
    finally:
        await receiver.stop()


async def _count(receiver: Receiver, n: int) -> bool:
    return len(receiver.received) >= n
