"""Operational events: what the webhooks pillar tells an account about its own webhooks.

Each is written by the pillar's own outbox in the transaction of the change it reports (the
endpoint disabled or enabled, its failing streak ended, a delivery dead-lettered), so it exists
if and only if that change committed, and is delivered like any other event.
"""

from __future__ import annotations

ENDPOINT_DISABLED = "endpoint.disabled"
ENDPOINT_ENABLED = "endpoint.enabled"
ENDPOINT_RECOVERED = "endpoint.recovered"
ATTEMPT_EXHAUSTED = "message.attempt.exhausted"

OPERATIONAL = frozenset(
    {ENDPOINT_DISABLED, ENDPOINT_ENABLED, ENDPOINT_RECOVERED, ATTEMPT_EXHAUSTED}
)
# Those an endpoint gets only when one of its patterns names them (`endpoint.*`, `message.*`, the
# exact type): `*` leaves them out, so an existing `*` subscriber sees no new traffic.
# `endpoint.disabled` predates them and stays selected by `*`.
OPT_IN = OPERATIONAL - {ENDPOINT_DISABLED}


def wildcard(event_type: str) -> str:
    """The pattern that selects every event of `event_type`'s kind: `*`, or for an opt-in type
    one no endpoint can hold (`ustun.webhooks.adapters.plans.INSERT_EVENT` compares with it)."""
    return "" if event_type in OPT_IN else "*"
