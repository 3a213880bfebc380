"""Stored responses that must not rest in clear: those marked `Cache-Control: no-store`.

A response that shows a secret (a webhook signing secret, say) says `no-store`, yet its retry
must still get it back. So the middleware keeps its body encrypted with a `Sealer` the app
passes in (the service passes its `SecretBox`); without one, the body is not kept at all
(`kept`); a replay opens it (`opened`). Every framework's middleware does the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Protocol

from ustun.idempotency.records import StoredResponse

CACHE_CONTROL = "cache-control"
NO_STORE = "no-store"
_CONTEXT = "ustun idempotency response"


class Sealer(Protocol):
    """Authenticated encryption of stored bodies, `context` bound as associated data."""

    def seal_bytes(self, plaintext: bytes, *, context: str) -> bytes:
        """Encrypt `plaintext` for `context`."""
        ...

    def open_bytes(self, sealed: bytes, *, context: str) -> bytes:
        """Decrypt what `seal_bytes` made for the same `context`; raise if it was altered."""
        ...


def forbids_storing(headers: Iterable[tuple[str, str]]) -> bool:
    """Whether a `Cache-Control` header has the `no-store` directive (RFC 9111 §5.2.2.5)."""
    return any(
        directive.split("=", 1)[0].strip().lower() == NO_STORE
        for name, value in headers
        if name.lower() == CACHE_CONTROL
        for directive in value.split(",")
    )


def context(scope: str, key: str) -> str:
    """The associated data of one record's body: it opens under no other scope or key."""
    # A key is visible ASCII (no NUL), so the NUL after it keeps every pair apart.
    return f"{_CONTEXT}\0{key}\0{scope}"


def kept(
    response: StoredResponse, sealer: Sealer | None, *, scope: str, key: str
) -> StoredResponse:
    """What to store of an answer: a `no-store` body only sealed, without a sealer not at all."""
    if response.body is None or not forbids_storing(response.headers):
        return response
    if sealer is None:
        return dataclasses.replace(response, body=None)
    sealed = sealer.seal_bytes(response.body, context=context(scope, key))
    return dataclasses.replace(response, body=sealed)


def opened(
    response: StoredResponse, sealer: Sealer | None, *, scope: str, key: str
) -> bytes | None:
    """The body to replay (unsealed), or None when it was not kept."""
    if response.body is None or not forbids_storing(response.headers):
        return response.body
    if sealer is None:
        return None
    return sealer.open_bytes(response.body, context=context(scope, key))
