"""A receiver's key must carry its prefix (`whsec_` or `whpk_`): a bare base64 string could be an
ed25519 public key, and taken for an HMAC secret it would let anyone forge `v1` signatures
(issue 26, item 13)."""

from __future__ import annotations

import base64
import time

import pytest

from ustun.errors import InvalidSignature
from ustun.http.signature import (
    PublicKey,
    Secret,
    SigningKey,
    headers,
    verifier,
    verifiers,
    verify,
)

BODY = b'{"id":"evt_1","type":"payment.created","data":{}}'
SECRET = Secret.generate()


def _public_key_forgery() -> tuple[SigningKey, dict[str, str]]:
    """An ed25519 endpoint's key, and a `v1` (HMAC) signature made with its public bytes:
    anyone who has seen the `whpk_` key can make one."""
    key = SigningKey.generate()
    return key, headers([Secret(key.public_key.key)], "msg_1", BODY, timestamp=int(time.time()))


def test_a_bare_public_key_is_refused_so_public_bytes_cannot_forge() -> None:
    key, forged = _public_key_forgery()
    bare = base64.b64encode(key.public_key.key).decode()
    with pytest.raises(ValueError, match="`whpk_`") as refused:
        verify(bare, forged, BODY)
    assert bare not in str(refused.value)
    with pytest.raises(InvalidSignature):
        verify(str(key.public_key), forged, BODY)


@pytest.mark.parametrize(
    "text", [base64.b64encode(b"k" * 32).decode(), "  c2VjcmV0  ", "-", "hello", "WHSEC_abc"]
)
def test_a_key_without_its_prefix_is_refused_with_what_to_add(text: str) -> None:
    with pytest.raises(ValueError, match=r"prefix: `whsec_`.*`whpk_`"):
        verifier(text)


def test_each_prefix_gives_its_kind_of_key() -> None:
    key = SigningKey.generate()
    assert verifier(f" {SECRET}\n") == SECRET
    assert verifier(str(key.public_key)) == key.public_key
    with pytest.raises(ValueError, match="private key"):
        verifier(str(key))


def test_verifiers_reads_one_or_several_keys_and_refuses_none() -> None:
    public = SigningKey.generate().public_key
    assert verifiers(str(SECRET)) == [SECRET]
    assert verifiers([SECRET, str(public)]) == [SECRET, public]
    assert isinstance(verifiers(public)[0], PublicKey)
    with pytest.raises(ValueError, match="no webhook secret"):
        verifiers([])
