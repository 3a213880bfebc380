"""The webhooks pillar's write path as plans (`ustun.store.plans`): written once, run on the
async engine's unit of work or on any synchronous DB-API connection (sqlite3, psycopg 3, Django's).

`emit(event, endpoint_id, notify=...)` is what the outbox writes: the event row, one delivery
per endpoint that gets it, and on PostgreSQL the NOTIFY that wakes dispatchers once the
transaction commits. A Django or Flask app runs it on its own connection, in its own transaction:

    run_sync(plans.emit(event, None, notify=True), DbapiConnection(connection, "postgresql"))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import String, bindparam, insert, text

from ustun import ids
from ustun.store.plans import Plan, count, rows
from ustun.store.statements import Statement
from ustun.webhooks.sending.wakeup import CHANNEL
from ustun.webhooks.states import Status
from ustun.webhooks.tables import deliveries, events

# The event row and, in the same statement, the ids of the endpoints that get a delivery: the
# account's enabled ones whose filter (`webhooks.patterns.matches`: `*`, an exact type or
# `prefix.*`) selects the type, or only `:endpoint_id` when given. Space-separated, NULL if none.
# Each dialect fills in its aggregate and JSON array reader.
_INSERT_EVENT = """INSERT INTO webhook_events (id, account_id, type, data, object_url, created_at)
VALUES (:id, :account_id, :type, :data, :object_url, :created_at)
RETURNING (SELECT {agg} FROM webhook_endpoints AS ep
  WHERE ep.account_id = :account_id AND ep.enabled
    AND (ep.id = :endpoint_id OR (:endpoint_id IS NULL AND EXISTS ({patterns}
      WHERE {p} = '*' OR {p} = :type
        OR (substr({p}, length({p}) - 1) = '.*'
            AND substr(:type, 1, length({p}) - 1) = substr({p}, 1, length({p}) - 1))))))
  AS targets"""


def _event_statement(sql: str) -> Any:
    return (
        text(sql)
        .bindparams(bindparam("created_at", type_=events.c.created_at.type))
        .columns(targets=String)
    )


INSERT_EVENT = Statement(
    _event_statement(
        _INSERT_EVENT.format(
            agg="string_agg(ep.id, ' ')",
            patterns="SELECT FROM json_array_elements_text(ep.events::json) AS p(pattern)",
            p="p.pattern",
        ).replace(":endpoint_id", "CAST(:endpoint_id AS VARCHAR)")
    ),
    per_dialect={
        "sqlite": _event_statement(
            _INSERT_EVENT.format(
                agg="group_concat(ep.id, ' ')",
                patterns="SELECT 1 FROM json_each(ep.events) AS p",
                p="p.value",
            )
        )
    },
)

# The columns of a delivery that `emit` queues; the others start NULL.
_QUEUED = (
    "id",
    "account_id",
    "endpoint_id",
    "event_id",
    "status",
    "attempt_count",
    "next_attempt_at",
    "created_at",
    "updated_at",
)
INSERT_DELIVERY = Statement(
    insert(deliveries).values(
        {c.name: bindparam(c.name, type_=c.type) for c in deliveries.c if c.name in _QUEUED}
    )
)

# Wakes every listening dispatcher; PostgreSQL delivers it only if the transaction commits.
NOTIFY = Statement(text("SELECT pg_notify(:channel, '')"))


def emit(event: Mapping[str, Any], endpoint_id: str | None, *, notify: bool) -> Plan[list[str]]:
    """Insert the `event` row (its columns: id, account_id, type, data, object_url, created_at)
    and a pending delivery of it to each endpoint that gets it: the account's enabled endpoints
    whose filter selects its type, or only `endpoint_id` when given (and enabled). With `notify`
    (PostgreSQL), NOTIFY dispatchers when any delivery was queued. Returns the deliveries' ids."""
    [row] = yield rows(INSERT_EVENT, {**event, "endpoint_id": endpoint_id})
    targets = [] if row.targets is None else row.targets.split(" ")
    queued = []
    for target in targets:
        delivery_id = ids.new_id("dlv")
        yield count(
            INSERT_DELIVERY,
            {
                "id": delivery_id,
                "account_id": event["account_id"],
                "endpoint_id": target,
                "event_id": event["id"],
                "status": Status.PENDING.value,
                "attempt_count": 0,
                "next_attempt_at": event["created_at"],
                "created_at": event["created_at"],
                "updated_at": event["created_at"],
            },
        )
        queued.append(delivery_id)
    if queued and notify:
        yield count(NOTIFY, {"channel": CHANNEL})
    return queued
