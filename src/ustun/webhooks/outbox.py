"""The transactional outbox: events and their deliveries commit with the business write.

A handler calls `emit(uow, …)` inside its unit of work. The event row and one delivery per
matching enabled endpoint are inserted on the same transaction, so a rolled-back request sends
nothing and a committed one is never lost. Dispatchers are woken after commit: by NOTIFY on
PostgreSQL (delivered only when the transaction commits) and by the in-process doorbell.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, TextualSelect, bindparam, insert, text

from ustun import clock, ids
from ustun.store import UnitOfWork
from ustun.store.statements import Statement
from ustun.webhooks import message
from ustun.webhooks.states import Status
from ustun.webhooks.tables import deliveries, events
from ustun.webhooks.wakeup import CHANNEL, doorbell

PING = "ping"
ENDPOINT_DISABLED = "endpoint.disabled"

# The event row and, in the same statement, the ids of the endpoints that get a delivery: the
# account's enabled ones whose filter (`webhooks.patterns.matches`: `*`, an exact type or
# `prefix.*`) selects the type, or only `:endpoint_id` when given. Space-separated, NULL if none.
_INSERT_EVENT = """INSERT INTO webhook_events (id, account_id, type, data, object_url, created_at)
VALUES (:id, :account_id, :type, :data, :object_url, :created_at)
RETURNING (SELECT {agg} FROM webhook_endpoints AS ep
  WHERE ep.account_id = :account_id AND ep.enabled
    AND (ep.id = :endpoint_id OR (:endpoint_id IS NULL AND EXISTS ({patterns}
      WHERE {p} = '*' OR {p} = :type
        OR (substr({p}, length({p}) - 1) = '.*'
            AND substr(:type, 1, length({p}) - 1) = substr({p}, 1, length({p}) - 1))))))
  AS targets"""
_PG_EMIT = _INSERT_EVENT.format(
    agg="string_agg(ep.id, ' ')",
    patterns="SELECT FROM json_array_elements_text(ep.events::json) AS p(pattern)",
    p="p.pattern",
).replace(":endpoint_id", "CAST(:endpoint_id AS VARCHAR)")
_SQLITE_EMIT = _INSERT_EVENT.format(
    agg="group_concat(ep.id, ' ')", patterns="SELECT 1 FROM json_each(ep.events) AS p", p="p.value"
)


def _emit_statement(sql: str) -> TextualSelect:
    return (
        text(sql)
        .bindparams(bindparam("created_at", type_=events.c.created_at.type))
        .columns(targets=String)
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
_EMIT = Statement(_emit_statement(_PG_EMIT), per_dialect={"sqlite": _emit_statement(_SQLITE_EMIT)})
_DELIVERIES = Statement(
    insert(deliveries).values(
        {c.name: bindparam(c.name, type_=c.type) for c in deliveries.c if c.name in _QUEUED}
    )
)
_NOTIFY = Statement(text("SELECT pg_notify(:channel, '')"))


async def _ring() -> None:
    doorbell.ring()


async def emit(
    uow: UnitOfWork,
    account_id: str,
    event_type: str,
    data: dict[str, Any],
    *,
    object_url: str | None = None,
    endpoint_id: str | None = None,
) -> str:
    """Record `event_type` with `data` and queue its deliveries; return the event id.

    `endpoint_id` sends it to that one endpoint regardless of its filter (the `ping` test).
    """
    now = clock.now()
    event_id = ids.new_id("evt")
    [row] = await _EMIT.rows(
        uow.conn,
        {
            "id": event_id,
            "account_id": account_id,
            "type": event_type,
            "data": message.stored_data(data),
            "object_url": object_url,
            "created_at": now,
            "endpoint_id": endpoint_id,
        },
    )
    if row.targets is None:
        return event_id
    await _DELIVERIES.many(
        uow.conn,
        [
            {
                "id": ids.new_id("dlv"),
                "account_id": account_id,
                "endpoint_id": target,
                "event_id": event_id,
                "status": Status.PENDING,
                "attempt_count": 0,
                "next_attempt_at": now,
                "created_at": now,
                "updated_at": now,
            }
            for target in row.targets.split(" ")
        ],
    )
    await wake(uow)
    return event_id


async def wake(uow: UnitOfWork) -> None:
    """Wake dispatchers once `uow` commits: NOTIFY (PostgreSQL) and the in-process doorbell."""
    if uow.conn.dialect.name == "postgresql":
        await _NOTIFY.count(uow.conn, {"channel": CHANNEL})
    uow.after_commit(_ring)
