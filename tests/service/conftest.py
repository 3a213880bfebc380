"""Fixtures of the service tests: a second account's client, sample event types."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from ustun.service.accounts import create_key
from ustun.service.event_docs import EventDoc
from ustun.store import Database


@pytest.fixture
async def other_client(client: httpx.AsyncClient, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """Like `client`, on the same app, but for another brand-new account."""
    key = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    async with httpx.AsyncClient(
        transport=client._transport,
        base_url=client.base_url,
        headers={"authorization": f"Bearer {key}"},
    ) as http:
        yield http


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
