"""Webhooks: verify what you receive (pure, `pip install ustun`), send what you emit (server).

Importing this package loads only pure modules, so a receiver needs nothing but ustun itself:

    from ustun.webhooks import verify
    event = verify("whsec_…", request.headers, raw_body)   # or the `whpk_…` of an ed25519 endpoint

The pillar is three subpackages around its shared core (the port `store.py`, `tables.py`,
`states.py`, `adapters/`, endpoint operations, the secret box, address checks, the event feed):
`sending/` emits and delivers (outbox, dispatcher), `receiving/` takes deliveries in (verify,
receiver, inbox, handlers, consumers, reconciler) and `brokers/` publishes to RabbitMQ and NATS.
The receiver's classes below need `ustun[middleware]`; this package loads them only when they
are first used, so `import ustun.webhooks` stays pure.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ustun.errors import (
    InvalidSignature,
    MissingHeaders,
    RepeatedHeaders,
    SignatureError,
    TimestampOutOfRange,
)
from ustun.http.signature import PublicKey, Secret
from ustun.webhooks.receiving.verify import Delivery, verify, verify_delivery

if TYPE_CHECKING:
    from ustun.webhooks.receiving.consumers import consume_nats, consume_rabbitmq
    from ustun.webhooks.receiving.cursors import DatabaseCursors, MemoryCursors
    from ustun.webhooks.receiving.handlers import Handlers
    from ustun.webhooks.receiving.inbox import DatabaseInbox, Inbox, MemoryInbox
    from ustun.webhooks.receiving.receiver import WebhookReceiver
    from ustun.webhooks.receiving.reconciler import Reconciler

__all__ = [
    "DatabaseCursors",
    "DatabaseInbox",
    "Delivery",
    "Handlers",
    "Inbox",
    "InvalidSignature",
    "MemoryCursors",
    "MemoryInbox",
    "MissingHeaders",
    "PublicKey",
    "Reconciler",
    "RepeatedHeaders",
    "Secret",
    "SignatureError",
    "TimestampOutOfRange",
    "WebhookReceiver",
    "consume_nats",
    "consume_rabbitmq",
    "verify",
    "verify_delivery",
]

# The receiver's names, imported on first use (they need `ustun[middleware]`).
_LAZY = {
    "DatabaseCursors": "cursors",
    "DatabaseInbox": "inbox",
    "Handlers": "handlers",
    "Inbox": "inbox",
    "MemoryCursors": "cursors",
    "MemoryInbox": "inbox",
    "Reconciler": "reconciler",
    "WebhookReceiver": "receiver",
    "consume_nats": "consumers",
    "consume_rabbitmq": "consumers",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"ustun.webhooks.receiving.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ustun.webhooks' has no attribute {name!r}")
