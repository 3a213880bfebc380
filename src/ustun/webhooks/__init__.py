"""Webhooks: verify what you receive (pure, `pip install ustun`), send what you emit (server).

Importing this package loads only pure modules, so a receiver needs nothing but ustun itself:

    from ustun.webhooks import verify
    event = verify("whsec_…", request.headers, raw_body)   # or the `whpk_…` of an ed25519 endpoint

The provider (outbox, dispatcher) and the Starlette receiver live in submodules that need
`ustun[server]`: `ustun.webhooks.outbox`, `.dispatcher`, `.receiver`; so do `Reconciler` and
`Handlers`, which `ustun.webhooks` loads only when they are first used.
"""

from typing import Any

from ustun.errors import (
    InvalidSignature,
    MissingHeaders,
    RepeatedHeaders,
    SignatureError,
    TimestampOutOfRange,
)
from ustun.http.signature import PublicKey, Secret
from ustun.webhooks.verify import verify

__all__ = [
    "InvalidSignature",
    "MissingHeaders",
    "PublicKey",
    "RepeatedHeaders",
    "Secret",
    "SignatureError",
    "TimestampOutOfRange",
    "verify",
]

# Server-side names, imported on first use so that `import ustun.webhooks` stays pure.
_LAZY = {"Handlers": "ustun.webhooks.handlers", "Reconciler": "ustun.webhooks.reconciler"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ustun.webhooks' has no attribute {name!r}")
