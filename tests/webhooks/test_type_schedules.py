"""An event type's own retry schedule: registered in the catalogue, followed by the dispatcher.

The registration's bounds as plain unit tests, then the dispatcher against a real local receiver
that always fails, on SQLite and PostgreSQL: a type with its own one-retry schedule dies after two
attempts, spaced as it says, while a type without one follows the default three retries.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from ustun.store import Database
from ustun.webhooks import catalog
from ustun.webhooks.catalog import MAX_RETRIES, Catalog
from ustun.webhooks.sending.dispatcher import Dispatcher
from webhook_support import SCHEDULE, MakeEndpoint, Receiver, attempts_of, send, settled, status

SCHEMA = {"type": "object"}


def test_a_type_without_a_schedule_has_none() -> None:
    events = Catalog()
    events.register("invoice.paid", schema=SCHEMA)
    assert events.retry_schedule("invoice.paid") is None
    assert events.retry_schedule("never.registered") is None


def test_a_registered_schedule_is_kept_as_seconds() -> None:
    events = Catalog()
    registered = events.register("invoice.paid", schema=SCHEMA, retry_schedule=[5, 60.5, 0])
    assert registered.retry_schedule == (5.0, 60.5, 0.0)
    assert events.retry_schedule("invoice.paid") == (5.0, 60.5, 0.0)


def test_a_new_version_keeps_the_schedule_unless_it_brings_one() -> None:
    events = Catalog()
    events.register("invoice.paid", schema=SCHEMA, retry_schedule=[5])
    events.register("invoice.paid", schema={"type": "object", "title": "V2"}, version=2)
    assert events.retry_schedule("invoice.paid") == (5.0,)
    events.register("invoice.paid", schema=SCHEMA, version=3, retry_schedule=[1, 2])
    assert events.retry_schedule("invoice.paid") == (1.0, 2.0)


@pytest.mark.parametrize(
    "schedule",
    [[], [-1], [math.inf], [math.nan], [1.0] * (MAX_RETRIES + 1)],
    ids=["empty", "negative", "infinite", "nan", "too-long"],
)
def test_a_schedule_out_of_bounds_is_refused_with_its_name(schedule: list[float]) -> None:
    with pytest.raises(ValueError, match=r"invoice\.paid: a retry schedule is 1 to 100 delays"):
        Catalog().register("invoice.paid", schema=SCHEMA, retry_schedule=schedule)


@pytest.fixture
def scheduled() -> Iterator[Catalog]:
    """A catalogue in use whose `invoice.failed` retries once, 0.5 s after its first attempt."""
    events = Catalog()
    events.register("invoice.failed", schema=SCHEMA, retry_schedule=[0.5])
    before = catalog.use(events)
    yield events
    catalog.use(before)


async def test_the_dispatcher_follows_a_types_own_schedule(
    db: Database,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    scheduled: Catalog,
    dispatcher: Dispatcher,
) -> None:
    receiver.script["/hook"] = [status(500) for _ in range(20)]
    await make_endpoint(receiver.url())
    own = await send(db, account_id, "invoice.failed")
    default = await send(db, account_id, "payment.created")

    own_row = await settled(db, own, "dead")
    default_row = await settled(db, default, "dead")

    assert own_row.attempt_count == 2
    assert default_row.attempt_count == 1 + len(SCHEDULE)
    tried = await attempts_of(db, own_row.id)
    gap = (tried[1].attempted_at - tried[0].attempted_at).total_seconds()
    # The type's 0.5 s less its jitter (±20 %) and clock grain; the default's first is 0.2 s.
    assert gap >= 0.5 * 0.8 - 0.05
    assert len(await attempts_of(db, default_row.id)) == 1 + len(SCHEDULE)
