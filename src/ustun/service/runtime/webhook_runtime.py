"""How the service configures the webhooks pillar from `Settings`: the dispatcher."""

from __future__ import annotations

from ustun.keys import secret_box
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher


def dispatch_config(settings: Settings) -> DispatchConfig:
    """Dispatcher tuning; the lease always outlasts a slow endpoint's timeout, twice over (a
    claim takes no more than an endpoint may have in flight, so nothing queues behind it)."""
    return DispatchConfig(
        retry_schedule=settings.retry_schedule,
        timeout=settings.webhook_timeout,
        allow_private=settings.webhook_allow_private,
        lease=max(settings.webhook_lease, 2 * settings.webhook_timeout),
        public_url=settings.public_base_url,
        circuit_failures=settings.webhook_circuit_failures,
        circuit_cooldown=settings.webhook_circuit_cooldown,
    )


def dispatcher(db: Database, settings: Settings) -> Dispatcher:
    """The webhook dispatcher a `Worker` runs."""
    return Dispatcher(db, secret_box(settings), dispatch_config(settings))
