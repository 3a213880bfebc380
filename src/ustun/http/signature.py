"""Standard Webhooks signatures (sans-I/O): symmetric and asymmetric keys, signing, verifying.

Both schemes sign the content "{webhook-id}.{webhook-timestamp}.{body}":
- symmetric: `v1,` + base64(HMAC-SHA256(key, content)), where key is the base64-decoded part of
  the secret after `whsec_`;
- asymmetric: `v1a,` + base64(ed25519 signature of content) under the private key `whsk_…`,
  checked with the public key `whpk_…` (each `whsk_`/`whpk_` + base64 of the 32 raw key bytes).
`webhook-signature` holds a space-separated list of signatures, so a sender can sign with old
and new keys while rotating; any one that matches is enough (https://www.standardwebhooks.com/,
"Signature scheme" and "Verifying"). ed25519 uses the `cryptography` package, imported only
when an ed25519 key is used, so HMAC verification needs nothing but the standard library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from ustun.defaults import DEFAULT_SIGNATURE_TOLERANCE
from ustun.errors import InvalidSignature, MissingHeaders, TimestampOutOfRange

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
SIGNING_KEY_PREFIX = "whsk_"
PUBLIC_KEY_PREFIX = "whpk_"
SECRET_BYTES = 32
ED25519_KEY_BYTES = 32
VERSION = "v1"
ASYMMETRIC_VERSION = "v1a"
# More signatures than this in one header is an attack, not a rotation.
MAX_SIGNATURES = 16
# The latest `webhook-timestamp` that is a time at all: 9999-12-31T23:59:59Z, the end of what a
# `datetime` holds. Later (309 digits and more overflowed a float) is out of range whatever the
# tolerance, so a consumer that checks none still refuses it rather than failing on it.
MAX_TIMESTAMP = 253_402_300_799

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


@dataclass(frozen=True, slots=True, repr=False)
class Secret:
    """A signing secret: the HMAC key bytes. `str()` gives the `whsec_…` form."""

    key: bytes
    # HMAC-SHA256 keyed once; each signature copies it. Keying anew (`hmac.digest`) looks the
    # digest up in OpenSSL each time, which cost a busy webhook worker about 20 µs a signature.
    _keyed: hmac.HMAC = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a webhook secret may not be empty")
        object.__setattr__(self, "_keyed", hmac.new(self.key, digestmod=hashlib.sha256))

    def mac(self, content: bytes) -> bytes:
        """HMAC-SHA256 of `content` under this secret."""
        keyed = self._keyed.copy()
        keyed.update(content)
        return keyed.digest()

    @classmethod
    def generate(cls) -> Secret:
        """A new random secret of 32 bytes (the contract allows 24 to 64)."""
        return cls(secrets.token_bytes(SECRET_BYTES))

    @classmethod
    def parse(cls, text: str) -> Secret:
        """Decode `whsec_<base64>` (the prefix and the base64 padding are optional)."""
        return cls(_decode(text, SECRET_PREFIX, "a webhook secret"))

    def __str__(self) -> str:
        return SECRET_PREFIX + base64.b64encode(self.key).decode()

    def __repr__(self) -> str:
        return "Secret(whsec_…)"


def _decode(text: str, prefix: str, what: str) -> bytes:
    """The bytes of `<prefix><base64>` (the prefix and the base64 padding are optional)."""
    encoded = text.strip().removeprefix(prefix).strip()
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is `{prefix}` followed by base64") from None


def _raw_key(text: str, prefix: str, what: str) -> bytes:
    raw = _decode(text, prefix, what)
    if len(raw) != ED25519_KEY_BYTES:
        raise ValueError(f"{what} is {ED25519_KEY_BYTES} bytes, not {len(raw)}")
    return raw


def _ed25519() -> ModuleType:
    """The `cryptography` ed25519 module, or a clear error naming what to install."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ModuleNotFoundError:  # pragma: no cover - `pip install ustun` without the extra
        raise ModuleNotFoundError(
            "ed25519 webhook keys need the cryptography package: pip install 'ustun[ed25519]'"
        ) from None
    return ed25519


@dataclass(frozen=True, slots=True, repr=False)
class PublicKey:
    """An ed25519 public key that checks `v1a` signatures. `str()` gives the `whpk_…` form."""

    key: bytes
    _public: Ed25519PublicKey = field(init=False, compare=False)

    def __post_init__(self) -> None:
        ed25519 = _ed25519()
        object.__setattr__(self, "_public", ed25519.Ed25519PublicKey.from_public_bytes(self.key))

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """Decode `whpk_<base64>` of the 32 raw key bytes."""
        return cls(_raw_key(text, PUBLIC_KEY_PREFIX, "an ed25519 public key"))

    def verifies(self, signature: bytes, content: bytes) -> bool:
        """Whether `signature` is this key's ed25519 signature of `content`."""
        from cryptography.exceptions import InvalidSignature as BadSignature

        try:
            self._public.verify(signature, content)
        except BadSignature:
            return False
        return True

    def __str__(self) -> str:
        return PUBLIC_KEY_PREFIX + base64.b64encode(self.key).decode()

    def __repr__(self) -> str:
        return f"PublicKey({self})"


@dataclass(frozen=True, slots=True, repr=False)
class SigningKey:
    """An ed25519 private key that makes `v1a` signatures. `str()` gives the `whsk_…` form."""

    key: bytes
    _private: Ed25519PrivateKey = field(init=False, compare=False)

    def __post_init__(self) -> None:
        ed25519 = _ed25519()
        object.__setattr__(self, "_private", ed25519.Ed25519PrivateKey.from_private_bytes(self.key))

    @classmethod
    def generate(cls) -> SigningKey:
        """A new random key pair (its private half)."""
        return cls(secrets.token_bytes(ED25519_KEY_BYTES))

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """Decode `whsk_<base64>` of the 32 raw private key bytes."""
        return cls(_raw_key(text, SIGNING_KEY_PREFIX, "an ed25519 signing key"))

    @property
    def public_key(self) -> PublicKey:
        """The public half, for receivers."""
        return PublicKey(self._private.public_key().public_bytes_raw())

    def sign(self, content: bytes) -> bytes:
        """The 64-byte ed25519 signature of `content`."""
        return self._private.sign(content)

    def __str__(self) -> str:
        return SIGNING_KEY_PREFIX + base64.b64encode(self.key).decode()

    def __repr__(self) -> str:
        return "SigningKey(whsk_…)"


# What signs a message (a sender's keys), and what checks it (a receiver's).
Signer = Secret | SigningKey
Verifier = Secret | PublicKey


def signer(text: str) -> Signer:
    """A sender's key from its text: `whsk_…` (ed25519) or `whsec_…` (HMAC)."""
    if text.strip().startswith(SIGNING_KEY_PREFIX):
        return SigningKey.parse(text)
    return Secret.parse(text)


def verifier(text: str) -> Verifier:
    """A receiver's key from its text: `whpk_…` (ed25519) or `whsec_…` (HMAC).

    The prefix is required, though Standard Webhooks libraries read a bare base64 string as an
    HMAC secret: that string could be an ed25519 public key, and an HMAC key anyone may know lets
    anyone forge `v1` signatures.
    """
    text = text.strip()
    if text.startswith(PUBLIC_KEY_PREFIX):
        return PublicKey.parse(text)
    if text.startswith(SECRET_PREFIX):
        return Secret.parse(text)
    if text.startswith(SIGNING_KEY_PREFIX):
        raise ValueError(
            "a `whsk_` signing key is the sender's private key: verify with its `whpk_` public key"
        )
    raise ValueError(
        "add the key's prefix: `whsec_` for a secret, `whpk_` for an ed25519 public key"
    )


def verifiers(secret: Verifier | str | Iterable[Verifier | str]) -> list[Verifier]:
    """A receiver's keys from one key or several (while rotating), texts read by `verifier`;
    `ValueError` for a text that is not a key, or for no key at all."""
    given = [secret] if isinstance(secret, Secret | PublicKey | str) else list(secret)
    if not given:
        raise ValueError("no webhook secret given: pass a `whsec_` secret or a `whpk_` public key")
    return [verifier(s) if isinstance(s, str) else s for s in given]


@dataclass(frozen=True, slots=True)
class SignedHeaders:
    """The verified `webhook-id` and `webhook-timestamp` of a message."""

    id: str
    timestamp: int


def _content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    """What both schemes sign: "{webhook-id}.{webhook-timestamp}.{body}"."""
    return b"%s.%d.%s" % (msg_id.encode(), timestamp, body)


def sign(key: Signer, msg_id: str, timestamp: int, body: bytes) -> str:
    """One signature: `v1,<base64>` under a secret, `v1a,<base64>` under an ed25519 key."""
    content = _content(msg_id, timestamp, body)
    if isinstance(key, SigningKey):
        return f"{ASYMMETRIC_VERSION},{base64.b64encode(key.sign(content)).decode()}"
    return f"{VERSION},{base64.b64encode(key.mac(content)).decode()}"


def signature_header(signing: Iterable[Signer], msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: one signature per key, space-separated."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in signing)


def headers(
    signing: Iterable[Signer], msg_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers for `body`, signed now (or at `timestamp`)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: signature_header(signing, msg_id, ts, body),
    }


def _candidates(header: str) -> dict[str, list[bytes]]:
    """The decoded signatures of a header by version (`v1`, `v1a`); garbage is skipped."""
    found: dict[str, list[bytes]] = {VERSION: [], ASYMMETRIC_VERSION: []}
    for entry in header.split(" ")[:MAX_SIGNATURES]:
        version, _, encoded = entry.partition(",")
        if version not in found or not encoded:
            continue
        try:
            found[version].append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return found


def _matches(key: Verifier, offered: dict[str, list[bytes]], content: bytes) -> bool:
    """Whether any offered signature of the key's scheme is the key's signature of `content`.

    Every candidate is checked (no early exit), so timing says nothing about which one matched;
    HMAC digests are compared in constant time. ed25519 verification needs no secret to hide.
    """
    matched = False
    if isinstance(key, PublicKey):
        for candidate in offered[ASYMMETRIC_VERSION]:
            matched |= key.verifies(candidate, content)
        return matched
    expected = key.mac(content)
    for candidate in offered[VERSION]:
        matched |= hmac.compare_digest(expected, candidate)
    return matched


def _timestamp(raw: str) -> int:
    """`webhook-timestamp` as Unix seconds, at most `MAX_TIMESTAMP` (read without converting
    more digits than that has, so no length of header makes `int()` slow or a float overflow)."""
    if not (raw.isascii() and raw.isdigit()):
        raise MissingHeaders(f"{TIMESTAMP_HEADER} must be Unix seconds, got {raw[:32]!r}")
    digits = raw.lstrip("0") or "0"
    if len(digits) > len(str(MAX_TIMESTAMP)) or int(digits) > MAX_TIMESTAMP:
        raise TimestampOutOfRange(
            f"{TIMESTAMP_HEADER} of {len(digits)} digits is after the year 9999: not a time"
        )
    return int(digits)


def verify(
    secret: Verifier | str | Iterable[Verifier | str],
    message_headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = DEFAULT_SIGNATURE_TOLERANCE,
    now: float | None = None,
) -> SignedHeaders:
    """Check a message's signature over the raw `body`; raise a `SignatureError` if it fails.

    `secret` is a `whsec_` secret (`v1` signatures) or a `whpk_` public key (`v1a`), or several;
    a text that is neither is a `ValueError` (see `verifier`).
    """
    keys = verifiers(secret)
    lowered = {k.lower(): v for k, v in message_headers.items()}
    msg_id = lowered.get(ID_HEADER, "")
    raw_ts = lowered.get(TIMESTAMP_HEADER, "").strip()
    header = lowered.get(SIGNATURE_HEADER, "")
    present = {ID_HEADER: msg_id, TIMESTAMP_HEADER: raw_ts, SIGNATURE_HEADER: header}
    missing = [name for name, value in present.items() if not value]
    if missing:
        raise MissingHeaders(f"missing webhook header(s): {', '.join(missing)}")
    timestamp = _timestamp(raw_ts)
    skew = (time.time() if now is None else now) - timestamp
    if abs(skew) > tolerance:
        side = "old" if skew > 0 else "far in the future"
        raise TimestampOutOfRange(
            f"{TIMESTAMP_HEADER} is {abs(skew):.0f} s {side} (tolerance {tolerance:.0f} s)"
        )
    offered = _candidates(header)
    content = _content(msg_id, timestamp, body)
    matched = False
    for key in keys:
        matched |= _matches(key, offered, content)
    if not matched:
        raise InvalidSignature("no webhook signature matches the body under the given secret")
    return SignedHeaders(msg_id, timestamp)
