"""An endpoint's signature scheme: `hmac-sha256` (`whsec_` secret) or `ed25519` (`whsk_` key).

The key is sealed at rest either way; what an API answer may show of it differs: an HMAC
secret once (the receiver needs it), an ed25519 key never (only its `whpk_` public key).
"""

from __future__ import annotations

from typing import Final, Literal

from ustun.http.signature import Secret, Signer, SigningKey

HMAC_SHA256: Final = "hmac-sha256"
ED25519: Final = "ed25519"
Scheme = Literal["hmac-sha256", "ed25519"]
SCHEMES: tuple[Scheme, ...] = (HMAC_SHA256, ED25519)


def new_key(scheme: str) -> Signer:
    """A fresh signing key of `scheme`."""
    if scheme == ED25519:
        return SigningKey.generate()
    if scheme == HMAC_SHA256:
        return Secret.generate()
    raise ValueError(f"unknown signature scheme {scheme!r}: one of {', '.join(SCHEMES)}")


def public_key(key: Signer) -> str | None:
    """The `whpk_…` a receiver verifies with, for an ed25519 key; None for an HMAC secret."""
    return str(key.public_key) if isinstance(key, SigningKey) else None


def shown(key: Signer) -> dict[str, str | None]:
    """What a create or rotate answer adds about a new key: an HMAC secret; for an ed25519 key
    a null `secret` (the endpoint's `public_key` is all a receiver needs)."""
    return {"secret": None if isinstance(key, SigningKey) else str(key)}
