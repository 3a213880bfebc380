"""Fixtures for the webhooks pillar: an account, a receiver, a running dispatcher."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker_support import CountingInbox
from support import in_background
from ustun.service.plumbing.accounts import account_for_key
from ustun.store import Database
from ustun.webhooks import endpoints as ops
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher
from webhook_support import PUBLIC_URL, SCHEDULE, MakeEndpoint, Receiver


@pytest.fixture
async def account_id(db: Database, api_key: str) -> str:
    account = await account_for_key(db, api_key)
    assert account is not None
    return account.id


@pytest.fixture
def box() -> SecretBox:
    return SecretBox("test-only-secret-key-0123456789abcdef")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    server = await Receiver().start()
    yield server
    await server.stop()


@pytest.fixture
def config() -> DispatchConfig:
    return DispatchConfig(
        retry_schedule=SCHEDULE,
        timeout=2.0,
        allow_private=True,
        lease=10.0,
        public_url=PUBLIC_URL,
        poll_interval=0.2,
        # No circuit breaker: these tests judge retries, which an open circuit would hold back
        # (tests/webhooks/test_circuit_breaker.py turns it on).
        circuit_failures=0,
    )


@pytest.fixture
async def dispatcher(
    db: Database, box: SecretBox, config: DispatchConfig
) -> AsyncIterator[Dispatcher]:
    """A dispatcher running in this test's event loop until the test ends."""
    async with in_background(Dispatcher(db, box, config)) as started:
        yield started


@pytest.fixture
def make_endpoint(db: Database, box: SecretBox, account_id: str) -> MakeEndpoint:
    async def make(url: str, events: tuple[str, ...] = ("*",), **extra: object) -> tuple[str, str]:
        async with db.unit_of_work() as uow:
            endpoint_id, secret = await ops.create(
                uow,
                box,
                account_id,
                url=url,
                events=events,
                **extra,  # type: ignore[arg-type]
            )
        return endpoint_id, str(secret)

    return make


@pytest.fixture
def inbox(db: Database) -> CountingInbox:
    return CountingInbox(db)


@pytest.fixture
def handled() -> Counter[str]:
    """How often the `handlers` ran for each event id."""
    return Counter()


@pytest.fixture
def handlers(handled: Counter[str]) -> Handlers:
    registry = Handlers(backoff=0.01)

    @registry.on("payment.*")
    async def count(event: dict[str, Any]) -> None:
        handled[event["id"]] += 1

    return registry
