"""The pillar's records have one field per column of their table, in the table's order: the
adapters make them from `select(table)` rows by position."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Table

from ustun.webhooks.records import Delivery, Endpoint, Event
from ustun.webhooks.store import Attempt
from ustun.webhooks.tables import attempts, deliveries, endpoints, events


@pytest.mark.parametrize(
    ("record", "table"),
    [(Endpoint, endpoints), (Event, events), (Delivery, deliveries), (Attempt, attempts)],
)
def test_a_record_has_its_tables_columns_in_order(record: Any, table: Table) -> None:
    assert record._fields == tuple(c.name for c in table.c)
