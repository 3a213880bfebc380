"""The webhooks pillar's write path as plans (`ustun.store.plans`): written once, run on the
async engine's unit of work or on any synchronous DB-API connection (sqlite3, psycopg 3, Django's).

`emit(event, endpoint_id, notify=...)` is what the outbox writes: the event row, one delivery
per endpoint that gets it, and on PostgreSQL the NOTIFY that wakes dispatchers once the
transaction commits. `insert_endpoint` registers an endpoint, `retry` sends a delivery again,
`claim_inbox`/`inbox_done` are a receiver's inbox. A Django or Flask app runs them on its own
connection, in its own transaction:

    run_sync(plans.emit(event, None, notify=True), DbapiConnection(connection, "postgresql"))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, exists, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ustun import ids
from ustun.store.plans import Plan, count, rows
from ustun.store.statements import Statement
from ustun.store.tables import accounts
from ustun.webhooks import filters
from ustun.webhooks.operational import wildcard
from ustun.webhooks.sending.wakeup import CHANNEL
from ustun.webhooks.states import Status
from ustun.webhooks.tables import deliveries, endpoints, events, inbox

# The event row and, in the same statement, the endpoints that may get a delivery: the
# account's enabled ones whose `events` (`webhooks.patterns.matches`: `*`, an exact type or
# `prefix.*`) selects the type, or only `:endpoint_id` when given. `*` selects it only if it
# equals `:wildcard` (`webhooks.operational.wildcard`: never for an opt-in operational type).
# One line each (NULL if none): an endpoint's id, then for one with a payload filter a space
# and the filter's text, which `emit` tests the event's data with. The text is compact JSON
# with control characters escaped (`webhooks.filters.dumps`): it holds no newline. One scan of
# the endpoints, as before filters: an endpoint without one costs the CASE alone.
# Each dialect fills in its aggregate, newline and JSON array reader.
_TARGET = """CASE WHEN ep."filter" IS NULL THEN ep.id ELSE ep.id || ' ' || ep."filter" END"""
_INSERT_EVENT = """INSERT INTO webhook_events
  (id, account_id, type, data, object_url, created_at, traceparent)
VALUES (:id, :account_id, :type, :data, :object_url, :created_at, :traceparent)
RETURNING (SELECT {agg} FROM webhook_endpoints AS ep
  WHERE ep.account_id = :account_id AND ep.enabled
    AND (ep.id = :endpoint_id OR (:endpoint_id IS NULL AND EXISTS ({patterns}
      WHERE {p} = :wildcard OR {p} = :type
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
            agg=f"string_agg({_TARGET}, chr(10))",
            patterns="SELECT FROM json_array_elements_text(ep.events::json) AS p(pattern)",
            p="p.pattern",
        ).replace(":endpoint_id", "CAST(:endpoint_id AS VARCHAR)")
    ),
    per_dialect={
        "sqlite": _event_statement(
            _INSERT_EVENT.format(
                agg=f"group_concat({_TARGET}, char(10))",
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


def traceparents(event_ids: Iterable[str]) -> Plan[dict[str, str]]:
    """The stored trace context of each of the events that has one (`ustun.tracing`), read
    only when tracing is on."""
    found = yield rows(
        select(events.c.id, events.c.traceparent).where(
            events.c.id.in_(sorted(set(event_ids))), events.c.traceparent.is_not(None)
        )
    )
    return {row.id: row.traceparent for row in found}


def emit(event: Mapping[str, Any], endpoint_id: str | None, *, notify: bool) -> Plan[list[str]]:
    """Insert the `event` row (its columns: id, account_id, type, data, object_url, created_at,
    traceparent) and a pending delivery of it to each endpoint that gets it: the account's
    enabled endpoints whose `events` select its type and whose payload filter, if any, passes
    its data; or only `endpoint_id` when given (and enabled), whatever its payload filter. With
    `notify` (PostgreSQL), NOTIFY dispatchers when any delivery was queued. Returns the
    deliveries' ids."""
    selects = {"endpoint_id": endpoint_id, "wildcard": wildcard(event["type"])}
    [row] = yield rows(INSERT_EVENT, {**event, **selects})
    targets = _chosen(row.targets, event["data"], filtered=endpoint_id is None)
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
        yield from wake()
    return queued


def _chosen(targets: str | None, data: str, *, filtered: bool) -> list[str]:
    """The ids of the endpoints in `targets` (INSERT_EVENT's lines) that get the event whose
    stored `data` is this: those without a payload filter, and those whose filter passes the
    data (all of them unless `filtered`). The data is decoded only if some endpoint has one."""
    if targets is None:
        return []
    lines = targets.split("\n")
    if " " not in targets:
        return lines
    found = [line.partition(" ") for line in lines]
    if not filtered:
        return [endpoint_id for endpoint_id, _, _ in found]
    payload = json.loads(data)
    return [
        endpoint_id
        for endpoint_id, _, text in found
        if not text or filters.cached(text).matches(payload)
    ]


def wake() -> Plan[None]:
    """NOTIFY dispatchers (PostgreSQL only), once the transaction commits."""
    yield count(NOTIFY, {"channel": CHANNEL})


# Every column of an endpoint; those a new endpoint leaves out (its previous secret, say) NULL.
INSERT_ENDPOINT = Statement(
    insert(endpoints).values({c.name: bindparam(c.name, type_=c.type) for c in endpoints.c})
)


# Serialises an account's quota checks until commit: on PostgreSQL `FOR NO KEY UPDATE` of its
# row (inserts referencing it are not blocked); SQLite's writers take turns already.
LOCK_ACCOUNT = Statement(
    select(accounts.c.id)
    .where(accounts.c.id == bindparam("account_id"))
    .with_for_update(key_share=True)
)
COUNT_ENDPOINTS = Statement(
    select(func.count().label("held"))
    .select_from(endpoints)
    .where(endpoints.c.account_id == bindparam("account_id"))
)


def lock_account(account_id: str) -> Plan[None]:
    """Serialise the account's quota checks until the transaction ends."""
    yield rows(LOCK_ACCOUNT, {"account_id": account_id})


def endpoints_held(account_id: str) -> Plan[int]:
    """How many endpoints the account has, its quota checks serialised until commit (so the
    count holds while this transaction adds one)."""
    yield from lock_account(account_id)
    [row] = yield rows(COUNT_ENDPOINTS, {"account_id": account_id})
    return int(row.held)


def insert_endpoint(values: Mapping[str, Any]) -> Plan[None]:
    """Insert a new endpoint row (`webhooks.endpoints.new_endpoint` makes its columns)."""
    yield count(INSERT_ENDPOINT, values)


ENDPOINT_ENABLED = Statement(
    select(endpoints.c.enabled).where(endpoints.c.id == bindparam("endpoint_id"))
)
_NOW = bindparam("now", type_=deliveries.c.updated_at.type)
# The deliveries whose event still has its payload: an expunged event's are never due again
# (`webhooks.retention`; the API answers 409 `event-expunged` before it gets here).
PAYLOAD_KEPT = ~exists().where(
    events.c.id == deliveries.c.event_id, events.c.expunged_at.is_not(None)
)
RESEND = Statement(
    update(deliveries)
    .where(deliveries.c.id == bindparam("delivery_id"), PAYLOAD_KEPT)
    .values(status=bindparam("status"), next_attempt_at=_NOW, lease_token=None, updated_at=_NOW)
)


def retry(
    delivery_id: str, endpoint_id: str, status: Status, now: datetime, *, notify: bool
) -> Plan[bool]:
    """Make the delivery due `now` with `status`, out of any worker's lease, if its endpoint
    exists and is enabled (False, nothing changed, if not); with `notify` (PostgreSQL), NOTIFY
    dispatchers."""
    found = yield rows(ENDPOINT_ENABLED, {"endpoint_id": endpoint_id})
    if not (found and found[0].enabled):
        return False
    yield count(RESEND, {"delivery_id": delivery_id, "status": status.value, "now": now})
    if notify:
        yield from wake()
    return True


# A receiver's inbox: the id inserted unless it is there, else taken over if its handler never
# finished and it was claimed before `stale`; marked handled at `now`.
_RECEIVED = {
    "webhook_id": bindparam("webhook_id"),
    "type": bindparam("type"),
    "received_at": bindparam("now", type_=inbox.c.received_at.type),
    "handler_attempts": 0,
}
CLAIM_INBOX = Statement(
    pg_insert(inbox).values(_RECEIVED).on_conflict_do_nothing(index_elements=["webhook_id"]),
    per_dialect={
        "sqlite": sqlite_insert(inbox)
        .values(_RECEIVED)
        .on_conflict_do_nothing(index_elements=["webhook_id"])
    },
)
RETAKE_INBOX = Statement(
    update(inbox)
    .where(
        inbox.c.webhook_id == bindparam("webhook_id"),
        inbox.c.handled_at.is_(None),
        inbox.c.received_at < bindparam("stale", type_=inbox.c.received_at.type),
    )
    .values(received_at=bindparam("now", type_=inbox.c.received_at.type))
)
INBOX_DONE = Statement(
    update(inbox)
    .where(inbox.c.webhook_id == bindparam("webhook_id"))
    .values(
        handled_at=bindparam("now", type_=inbox.c.handled_at.type),
        handler_attempts=inbox.c.handler_attempts + 1,
    )
)


def claim_inbox(webhook_id: str, event_type: str, *, now: datetime, stale: datetime) -> Plan[bool]:
    """Whether this delivery of `webhook_id` runs its handler: the id is new, or its handler
    never finished and it was claimed before `stale` (its claimer is presumed dead)."""
    params = {"webhook_id": webhook_id, "type": event_type, "now": now, "stale": stale}
    if (yield count(CLAIM_INBOX, params)):
        return True
    return bool((yield count(RETAKE_INBOX, params)))


def inbox_done(webhook_id: str, now: datetime) -> Plan[None]:
    """The id's handler finished at `now`."""
    yield count(INBOX_DONE, {"webhook_id": webhook_id, "now": now})
