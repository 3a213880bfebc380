"""Signatures against independent implementations, both ways: HMAC (`v1`) against the
`standardwebhooks` package, ed25519 (`v1a`) against `cryptography` on the spec's format."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from cryptography.exceptions import InvalidSignature as CryptoInvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ustun.errors import InvalidSignature, MissingHeaders, SignatureError, TimestampOutOfRange
from ustun.http.signature import (
    PublicKey,
    Secret,
    SigningKey,
    headers,
    sign,
    signer,
    verifier,
    verify,
)

BODY = b'{"id":"evt_1","type":"payment.created","data":{"amount":100,"note":"\xc3\xa9"}}'


def test_secret_round_trips_and_hides_itself() -> None:
    secret = Secret.generate()
    assert str(secret).startswith("whsec_")
    assert Secret.parse(str(secret)) == secret
    assert len(secret.key) == 32
    assert "whsec_" in repr(secret)
    assert base64.b64encode(secret.key).decode() not in repr(secret)
    unpadded = str(Secret(b"x" * 25)).rstrip("=")
    assert Secret.parse(unpadded).key == b"x" * 25
    with pytest.raises(ValueError, match="base64"):
        Secret.parse("whsec_not base64!")
    with pytest.raises(ValueError, match="empty"):
        Secret.parse("whsec_")


def test_theirs_verifies_with_ours() -> None:
    secret = Secret.generate()
    ts = int(time.time())
    theirs = Webhook(str(secret)).sign("msg_1", datetime.fromtimestamp(ts, UTC), BODY.decode())
    got = verify(
        str(secret),
        {"Webhook-Id": "msg_1", "Webhook-Timestamp": str(ts), "Webhook-Signature": theirs},
        BODY,
    )
    assert (got.id, got.timestamp) == ("msg_1", ts)


def test_ours_verifies_with_theirs_including_rotation() -> None:
    old, new = Secret.generate(), Secret.generate()
    sent = headers([new, old], "msg_2", BODY)
    assert len(sent["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        assert Webhook(str(secret)).verify(BODY, sent)["id"] == "evt_1"
        verify(secret, sent, BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(str(Secret.generate())).verify(BODY, sent)


def test_sign_matches_theirs_byte_for_byte_message_after_message() -> None:
    """One secret signs many messages (it is keyed once): each matches the reference."""
    secret = Secret(b"k" * 24)
    reference = Webhook(str(secret))
    for n in (0, 1, 2, 1, 0):
        ts, body = 1_700_000_000 + n, BODY * (n + 1)
        theirs = reference.sign(f"m{n}", datetime.fromtimestamp(ts, UTC), body.decode())
        assert sign(secret, f"m{n}", ts, body) == theirs


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"webhook-signature": "v1,Zm9yZ2Vk"}, InvalidSignature),
        ({"webhook-signature": "v2,abc v1,!!!"}, InvalidSignature),
        ({"webhook-id": "msg_other"}, InvalidSignature),
        ({"webhook-timestamp": "1"}, TimestampOutOfRange),
        ({"webhook-timestamp": str(int(time.time()) + 3600)}, TimestampOutOfRange),
        ({"webhook-timestamp": "12.5"}, MissingHeaders),
        ({"webhook-signature": ""}, MissingHeaders),
        ({"webhook-id": ""}, MissingHeaders),
    ],
)
def test_refuses(change: dict[str, str], error: type[SignatureError]) -> None:
    secret = Secret.generate()
    sent = headers([secret], "msg_3", BODY) | change
    with pytest.raises(error):
        verify(secret, sent, BODY)


def test_refuses_wrong_secret_and_changed_body() -> None:
    secret = Secret.generate()
    sent = headers([secret], "msg_4", BODY)
    with pytest.raises(InvalidSignature):
        verify(Secret.generate(), sent, BODY)
    with pytest.raises(InvalidSignature):
        verify(secret, sent, BODY + b" ")


def test_tolerance_is_a_parameter() -> None:
    secret = Secret.generate()
    sent = headers([secret], "msg_5", BODY, timestamp=1_000)
    assert verify(secret, sent, BODY, tolerance=10, now=1_009).timestamp == 1_000
    with pytest.raises(TimestampOutOfRange, match="old"):
        verify(secret, sent, BODY, tolerance=10, now=1_011)
    with pytest.raises(TimestampOutOfRange, match="future"):
        verify(secret, sent, BODY, tolerance=10, now=989)


# ed25519 (`v1a`), checked against `cryptography` used directly on the spec's format.


def _spec_content(msg_id: str, ts: int, body: bytes) -> bytes:
    return f"{msg_id}.{ts}.".encode() + body


def test_ed25519_keys_round_trip_and_hide_the_private_half() -> None:
    key = SigningKey.generate()
    assert str(key).startswith("whsk_")
    assert str(key.public_key).startswith("whpk_")
    assert SigningKey.parse(str(key)) == key
    assert PublicKey.parse(str(key.public_key)) == key.public_key
    assert signer(str(key)) == key
    assert verifier(str(key.public_key)) == key.public_key
    assert "whsk_" in repr(key)
    assert base64.b64encode(key.key).decode() not in repr(key)
    with pytest.raises(ValueError, match="32 bytes"):
        PublicKey.parse("whpk_" + base64.b64encode(b"x" * 31).decode())
    with pytest.raises(ValueError, match="base64"):
        SigningKey.parse("whsk_not base64!")
    with pytest.raises(ValueError, match="public key"):
        verifier(str(key))  # a receiver is never handed the private key by mistake


def test_ours_verifies_with_cryptography_from_the_spec() -> None:
    key = SigningKey.generate()
    ts = int(time.time())
    sent = headers([key], "msg_1", BODY, timestamp=ts)
    version, _, encoded = sent["webhook-signature"].partition(",")
    assert version == "v1a"
    raw_public = base64.b64decode(str(key.public_key).removeprefix("whpk_"))
    their_key = Ed25519PublicKey.from_public_bytes(raw_public)
    their_key.verify(base64.b64decode(encoded), _spec_content("msg_1", ts, BODY))
    with pytest.raises(CryptoInvalidSignature):
        their_key.verify(base64.b64decode(encoded), _spec_content("msg_1", ts + 1, BODY))


def test_ed25519_theirs_verifies_with_ours() -> None:
    """A signature made by `cryptography` alone, over the spec's content, passes `verify`."""
    theirs = Ed25519PrivateKey.generate()
    public = "whpk_" + base64.b64encode(theirs.public_key().public_bytes_raw()).decode()
    ts = int(time.time())
    signature = base64.b64encode(theirs.sign(_spec_content("msg_9", ts, BODY))).decode()
    sent = {"webhook-id": "msg_9", "webhook-timestamp": str(ts), "webhook-signature": ""}
    sent["webhook-signature"] = f"v1,Zm9yZ2Vk v1a,{signature}"
    assert verify(public, sent, BODY).id == "msg_9"
    assert verify(PublicKey.parse(public), sent, BODY).timestamp == ts


def test_ed25519_rotation_sends_both_and_either_public_key_verifies() -> None:
    old, new = SigningKey.generate(), SigningKey.generate()
    sent = headers([new, old], "msg_2", BODY)
    assert [s.split(",")[0] for s in sent["webhook-signature"].split(" ")] == ["v1a", "v1a"]
    for key in (old, new):
        verify(str(key.public_key), sent, BODY)
    verify([str(SigningKey.generate().public_key), str(old.public_key)], sent, BODY)


def test_mixed_keys_verify_only_their_own_scheme() -> None:
    """An HMAC secret never accepts a `v1a` signature and a public key never a `v1` one."""
    secret, key = Secret.generate(), SigningKey.generate()
    sent = headers([secret, key], "msg_3", BODY)
    verify(secret, sent, BODY)
    verify(key.public_key, sent, BODY)
    only_v1a = dict(sent, **{"webhook-signature": sent["webhook-signature"].split(" ")[1]})
    with pytest.raises(InvalidSignature):
        verify(secret, only_v1a, BODY)
    only_v1 = dict(sent, **{"webhook-signature": sent["webhook-signature"].split(" ")[0]})
    with pytest.raises(InvalidSignature):
        verify(key.public_key, only_v1, BODY)


def test_ed25519_refuses_forged_tampered_and_wrong_key_signatures() -> None:
    key = SigningKey.generate()
    sent = headers([key], "msg_4", BODY)
    with pytest.raises(InvalidSignature):
        verify(SigningKey.generate().public_key, sent, BODY)  # wrong key
    with pytest.raises(InvalidSignature):
        verify(key.public_key, sent, BODY + b" ")  # tampered body
    with pytest.raises(InvalidSignature):
        verify(key.public_key, dict(sent, **{"webhook-id": "msg_5"}), BODY)
    forged = "v1a," + base64.b64encode(bytes(64)).decode()
    with pytest.raises(InvalidSignature):
        verify(key.public_key, dict(sent, **{"webhook-signature": forged}), BODY)
    short = "v1a," + base64.b64encode(b"short").decode()
    with pytest.raises(InvalidSignature):
        verify(key.public_key, dict(sent, **{"webhook-signature": short}), BODY)
    # An HMAC over the same content with the public key's bytes is no ed25519 signature.
    posing = sign(Secret(key.public_key.key), "msg_4", int(sent["webhook-timestamp"]), BODY)
    with pytest.raises(InvalidSignature):
        verify(key.public_key, dict(sent, **{"webhook-signature": "v1a" + posing[2:]}), BODY)
