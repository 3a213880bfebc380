"""Secrets at rest: AES-256-GCM under a key derived with HKDF-SHA256.

It seals webhook signing secrets, and stored idempotent responses that carry one.

The master key comes from `USTUN_SECRET_KEY`. With SQLite and no key set, one is generated
once into `<database file>.key` (mode 0600) beside the database; PostgreSQL deployments run on
many machines that must share the key, so there ustun refuses to start without it. A box may
also hold the previous key (`USTUN_SECRET_KEY_PREVIOUS`): it still opens, it never seals.
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy.engine import make_url

from ustun.errors import SecretKeyError

_INFO = b"ustun webhook signing secrets v1"
_NONCE_BYTES = 12
KEY_FILE_SUFFIX = ".key"


def derive_key(master_key: str, info: bytes) -> bytes:
    """A 32-byte key for one use (`info` names it) derived from the master key, HKDF-SHA256."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(
        master_key.encode()
    )


def _aead(master_key: str) -> AESGCM:
    return AESGCM(derive_key(master_key, _INFO))


class SecretBox:
    """Seal and open secrets; `context` (e.g. the endpoint id) is bound as associated data.

    It seals under `master_key` and opens under it or, during a key rotation, under `previous`.
    """

    def __init__(self, master_key: str, *, previous: str | None = None) -> None:
        self._aead = _aead(master_key)
        self._openers = (self._aead,) if previous is None else (self._aead, _aead(previous))

    def seal_bytes(self, plaintext: bytes, *, context: str) -> bytes:
        """Encrypt `plaintext` under a fresh nonce; the result is `nonce || ciphertext || tag`."""
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, context.encode())

    def open_bytes(self, sealed: bytes, *, context: str) -> bytes:
        """Decrypt what `seal_bytes` made for the same `context`, under either key."""
        for aead in self._openers:
            try:
                return aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], context.encode())
            except InvalidTag:
                continue
        raise SecretKeyError(
            "a sealed secret does not decrypt: USTUN_SECRET_KEY differs from the key it "
            "was sealed with"
        )

    def seal(self, plaintext: str, *, context: str) -> str:
        """Encrypt `plaintext`; the result is base64 text for a column."""
        return base64.b64encode(self.seal_bytes(plaintext.encode(), context=context)).decode()

    def open(self, token: str, *, context: str) -> str:
        """Decrypt what `seal` made for the same `context`."""
        return self.open_bytes(base64.b64decode(token), context=context).decode()


def _read_or_create(path: Path) -> str:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # another process may be writing it right now
            key = path.read_text().strip()
            if key:
                return key
            time.sleep(0.01)
        raise SecretKeyError(f"{path} is empty: delete it or set USTUN_SECRET_KEY") from None
    key = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def key_file(database_url: str) -> Path | None:
    """Where the key is generated when `USTUN_SECRET_KEY` is unset: beside a SQLite file only."""
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite") or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database + KEY_FILE_SUFFIX)


def master_key(secret_key: str | None, database_url: str) -> str:
    """The configured key, or the generated one beside a SQLite file; refuse on PostgreSQL."""
    if secret_key:
        return secret_key
    url = make_url(database_url)
    if not url.drivername.startswith("sqlite"):
        raise SecretKeyError(
            "USTUN_SECRET_KEY is not set. With PostgreSQL every ustun process must share the "
            "key that encrypts webhook signing secrets: set USTUN_SECRET_KEY to the same random "
            "string of at least 32 characters everywhere (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`)."
        )
    path = key_file(database_url)
    if path is None:
        return secrets.token_urlsafe(32)
    try:
        return _read_or_create(path)
    except OSError as exc:
        raise SecretKeyError(
            f"cannot create the key file {path} ({exc.strerror}): set USTUN_SECRET_KEY, or "
            "put the database where ustun may write"
        ) from None
