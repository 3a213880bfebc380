"""Signatures against the independent `standardwebhooks` implementation, both ways."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ustun.errors import InvalidSignature, MissingHeaders, SignatureError, TimestampOutOfRange
from ustun.http.signature import Secret, headers, sign, verify

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
