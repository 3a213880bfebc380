"""Waking this process's idle dispatchers at once when an event commits here.

Other processes' dispatchers hear of it through their store's listener (PostgreSQL NOTIFY) or
by polling; see `ustun.store.listen`.
"""

from __future__ import annotations

from ustun.store.listen import Doorbell

doorbell = Doorbell()
# PostgreSQL channel the outbox notifies on commit; every dispatcher LISTENs on it.
CHANNEL = "ustun_webhooks"
