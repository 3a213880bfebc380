"""What ustun derives from its secret key (`Settings.secret_key`): the box that seals secrets
at rest, the keys of the idempotency fingerprints, and a host framework's idempotency keys
built with both.

Sealed at rest: every webhook endpoint's signing secrets and broker URL, and the stored body
of an idempotent response marked `no-store`. Derived, never stored: the key of the idempotency
fingerprints (HMAC-SHA256), so a secret inside a request body cannot be confirmed from the
database; one made under the previous key is still checked while `secret_key_previous` is set.
"""

from __future__ import annotations

from ustun.idempotency.hosted import Atomic, Connect, HostedKeys
from ustun.settings import Settings, reveal
from ustun.webhooks.secretbox import SecretBox, derive_key, master_key

FINGERPRINT_KEY_INFO = b"ustun idempotency fingerprints v1"


def secret_box(settings: Settings) -> SecretBox:
    """The box for signing secrets; raises `SecretKeyError` on PostgreSQL without a key."""
    return SecretBox(
        master_key(reveal(settings.secret_key), settings.database_url),
        previous=reveal(settings.secret_key_previous),
    )


def fingerprint_keys(settings: Settings) -> tuple[bytes, bytes | None]:
    """The idempotency fingerprints' key, and during a rotation the previous key's."""
    current = master_key(reveal(settings.secret_key), settings.database_url)
    previous = reveal(settings.secret_key_previous)
    return (
        derive_key(current, FINGERPRINT_KEY_INFO),
        None if previous is None else derive_key(previous, FINGERPRINT_KEY_INFO),
    )


def hosted_keys(settings: Settings, *, connection: Connect, atomic: Atomic) -> HostedKeys:
    """Idempotency keys in a host framework's transactions (`atomic`) on its `connection`,
    with the settings' TTL, quota, sealer and fingerprint keys."""
    return HostedKeys(
        connection=connection,
        atomic=atomic,
        ttl=settings.idempotency_ttl,
        max_bytes=settings.idempotency_max_bytes or None,
        sealer=secret_box(settings),
        fingerprint_keys=tuple(k for k in fingerprint_keys(settings) if k is not None),
    )
