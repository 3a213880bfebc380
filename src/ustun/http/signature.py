"""Standard Webhooks signatures (sans-I/O): `whsec_` secrets, signing and verifying.

A signature is `v1,` + base64(HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")),
where key is the base64-decoded part of the secret after `whsec_`. `webhook-signature` holds a
space-separated list of signatures, so a sender can sign with old and new secrets while
rotating; any one that matches is enough (https://www.standardwebhooks.com/, "Verifying").
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

from ustun.defaults import DEFAULT_SIGNATURE_TOLERANCE
from ustun.http.errors import InvalidSignature, MissingHeaders, TimestampOutOfRange

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
SECRET_BYTES = 32
VERSION = "v1"
# More signatures than this in one header is an attack, not a rotation.
MAX_SIGNATURES = 16

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
        encoded = text.removeprefix(SECRET_PREFIX).strip()
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a webhook secret is `whsec_` followed by base64") from None
        return cls(key)

    def __str__(self) -> str:
        return SECRET_PREFIX + base64.b64encode(self.key).decode()

    def __repr__(self) -> str:
        return "Secret(whsec_…)"


@dataclass(frozen=True, slots=True)
class SignedHeaders:
    """The verified `webhook-id` and `webhook-timestamp` of a message."""

    id: str
    timestamp: int


def _signature(secret: Secret, msg_id: str, timestamp: int, body: bytes) -> bytes:
    return secret.mac(b"%s.%d.%s" % (msg_id.encode(), timestamp, body))


def sign(secret: Secret, msg_id: str, timestamp: int, body: bytes) -> str:
    """One signature, `v1,<base64>`."""
    digest = _signature(secret, msg_id, timestamp, body)
    return f"{VERSION},{base64.b64encode(digest).decode()}"


def signature_header(signing: Iterable[Secret], msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: one signature per secret, space-separated."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in signing)


def headers(
    signing: Iterable[Secret], msg_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers for `body`, signed now (or at `timestamp`)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: signature_header(signing, msg_id, ts, body),
    }


def _candidates(header: str) -> list[bytes]:
    """The decoded `v1` signatures of a header; other versions and garbage are skipped."""
    found = []
    for entry in header.split(" ")[:MAX_SIGNATURES]:
        version, _, encoded = entry.partition(",")
        if version != VERSION or not encoded:
            continue
        try:
            found.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return found


def verify(
    secret: Secret | str | Iterable[Secret | str],
    message_headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = DEFAULT_SIGNATURE_TOLERANCE,
    now: float | None = None,
) -> SignedHeaders:
    """Check a message's signature over the raw `body`; raise a `SignatureError` if it fails."""
    keys = [
        s if isinstance(s, Secret) else Secret.parse(s)
        for s in ([secret] if isinstance(secret, Secret | str) else secret)
    ]
    lowered = {k.lower(): v for k, v in message_headers.items()}
    msg_id = lowered.get(ID_HEADER, "")
    raw_ts = lowered.get(TIMESTAMP_HEADER, "").strip()
    header = lowered.get(SIGNATURE_HEADER, "")
    present = {ID_HEADER: msg_id, TIMESTAMP_HEADER: raw_ts, SIGNATURE_HEADER: header}
    missing = [name for name, value in present.items() if not value]
    if missing:
        raise MissingHeaders(f"missing webhook header(s): {', '.join(missing)}")
    if not (raw_ts.isascii() and raw_ts.isdigit()):
        raise MissingHeaders(f"{TIMESTAMP_HEADER} must be Unix seconds, got {raw_ts[:32]!r}")
    timestamp = int(raw_ts)
    skew = (time.time() if now is None else now) - timestamp
    if abs(skew) > tolerance:
        side = "old" if skew > 0 else "far in the future"
        raise TimestampOutOfRange(
            f"{TIMESTAMP_HEADER} is {abs(skew):.0f} s {side} (tolerance {tolerance:.0f} s)"
        )
    offered = _candidates(header)
    matched = False
    for key in keys:
        expected = _signature(key, msg_id, timestamp, body)
        for candidate in offered:
            # Compare every candidate (no early exit) so timing says nothing about which matched.
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise InvalidSignature("no webhook signature matches the body under the given secret")
    return SignedHeaders(msg_id, timestamp)
