"""Fixtures of the service tests."""

from __future__ import annotations

import pytest

from ustun.service.event_docs import EventDoc


@pytest.fixture
def event_docs() -> list[EventDoc]:
    """Two event types, as the webhook catalogue describes them."""
    payment = {
        "type": "object",
        "required": ["id", "amount", "currency", "status"],
        "properties": {
            "id": {"type": "string"},
            "amount": {"type": "integer"},
            "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "status": {"type": "string", "enum": ["pending", "succeeded"]},
        },
    }
    return [
        EventDoc("payment.succeeded", "A payment succeeded.", payment),
        EventDoc("ping", "A test event sent on request.", {"type": "object"}),
    ]
