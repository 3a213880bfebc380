"""ustun for Django and DRF: idempotency keys, events, jobs and conditional writes committed in
the view's own transaction, on Django's connection.

`INSTALLED_APPS += ["ustun.django"]`, `MIDDLEWARE += ["ustun.django.IdempotencyMiddleware"]`,
then `@idempotent`, `emit`, `enqueue`, `accepted`, `endpoints`, `receiver` (see docs/django.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ustun.django import endpoints
    from ustun.django.idempotency import idempotent
    from ustun.django.middleware import IdempotencyMiddleware
    from ustun.django.outbox import accepted, emit, enqueue
    from ustun.django.receiving import receiver

__all__ = [
    "IdempotencyMiddleware",
    "accepted",
    "emit",
    "endpoints",
    "enqueue",
    "idempotent",
    "receiver",
]

_HOMES = {
    "IdempotencyMiddleware": "ustun.django.middleware",
    "accepted": "ustun.django.outbox",
    "emit": "ustun.django.outbox",
    "endpoints": "ustun.django.endpoints",
    "enqueue": "ustun.django.outbox",
    "idempotent": "ustun.django.idempotency",
    "receiver": "ustun.django.receiving",
}


def __getattr__(name: str) -> Any:
    """Each name from its module on first use: Django imports this package while it loads its
    apps, before models may be imported."""
    from importlib import import_module

    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = import_module(_HOMES[name])
    # A submodule (`endpoints`) is its own export.
    return home if home.__name__ == f"{__name__}.{name}" else getattr(home, name)
