"""ustun for Django and DRF: idempotency keys, events, jobs and conditional writes committed in
the view's own transaction, on Django's connection.

`INSTALLED_APPS += ["ustun.django"]`, `MIDDLEWARE += ["ustun.django.IdempotencyMiddleware"]`,
then `@idempotent`, `emit`, `enqueue`, `accepted` (see docs/django.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ustun.django.idempotency import idempotent
    from ustun.django.middleware import IdempotencyMiddleware
    from ustun.django.outbox import accepted, emit, enqueue

__all__ = ["IdempotencyMiddleware", "accepted", "emit", "enqueue", "idempotent"]

_HOMES = {
    "IdempotencyMiddleware": "ustun.django.middleware",
    "accepted": "ustun.django.outbox",
    "emit": "ustun.django.outbox",
    "enqueue": "ustun.django.outbox",
    "idempotent": "ustun.django.idempotency",
}


def __getattr__(name: str) -> Any:
    """Each name from its module on first use: Django imports this package while it loads its
    apps, before models may be imported."""
    from importlib import import_module

    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
