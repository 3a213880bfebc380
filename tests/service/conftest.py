"""Fixtures of the service tests: a second account's client, sample event types."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from ustun.service.plumbing.accounts import create_key
from ustun.service.specs.event_types import CATALOGUE, EventType
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
def event_types() -> tuple[EventType, ...]:
    """The service's event catalogue."""
    return CATALOGUE
