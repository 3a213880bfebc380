"""What an account does to its webhook endpoints and deliveries, once for the API and dashboard.

Each operation runs its own unit of work (or read), checks what the request may not do (404,
409 `state-conflict`, quotas, refused URLs) as `ProblemError`s, and returns rows; the callers
render them. Conditional writes take the request's `Preconditions` (one If-Match path, through
`ustun.concurrency`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from yarl import URL

from ustun import clock
from ustun.errors import ProblemError
from ustun.http.preconditions import Preconditions
from ustun.http.signature import Signer
from ustun.store import Database
from ustun.webhooks import endpoint_auth, endpoints
from ustun.webhooks.adapters import for_connection, for_database
from ustun.webhooks.addresses import resolution_refusal, url_refusal
from ustun.webhooks.brokers import destinations
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.operational import ENDPOINT_ENABLED
from ustun.webhooks.records import Delivery, Endpoint, Event
from ustun.webhooks.retention import refuse_expunged
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending import quotas
from ustun.webhooks.sending.outbox import PING, emit, wake
from ustun.webhooks.states import Change, Status, sources, transition
from ustun.webhooks.store import Attempt

DISABLED_BY_REQUEST = "disabled by request"
ENABLED_BY_REQUEST = "enabled by request"
# What `recover` sends again: the statuses a resend may leave that did not end in success.
RECOVERABLE = tuple(s for s in sources(Change.RESEND) if s in (Status.FAILED, Status.DEAD))
# The body field that names a broker endpoint's destination, by kind.
DESTINATION_FIELD = {RABBITMQ: "exchange", NATS: "subject"}


def _invalid(field: str, reason: str, error_type: str, message: str = "") -> ProblemError:
    """422 `validation-error` on `body.<field>`: `reason` in the detail, `message` (else the
    reason) in its `errors` entry."""
    return ProblemError(
        "validation-error",
        f"Invalid value in body.{field}: {reason}.",
        errors=[{"field": f"body.{field}", "message": message or reason, "type": error_type}],
    )


async def check_url(kind: str, url: str, *, allow_private: bool) -> None:
    """Raise 422 `validation-error` on `body.url` unless events may go to `url`, an HTTP
    endpoint's or a `kind` broker's: its scheme, host and options, then every address its host
    resolves to now (a name that does not resolve is left to the check at send time)."""
    if kind == endpoints.HTTP:
        reason = url_refusal(url, allow_private=allow_private)
    else:
        reason = destinations.url_refusal(kind, url, allow_private=allow_private)
    if reason is None and not allow_private:
        reason = await resolution_refusal(*_host_and_port(kind, url))
    if reason is not None:
        raise _invalid("url", reason, "url")


def _host_and_port(kind: str, url: str) -> tuple[str, int]:
    """The host and port a sender of a valid `url` connects to."""
    if kind == endpoints.HTTP:
        target = URL(url)
        return target.raw_host or "", target.port or 0
    return destinations.address(url)


def check_name(kind: str, name: str) -> None:
    """Raise 422 `validation-error` on `body.exchange` or `body.subject` unless a `kind` broker
    endpoint may publish to `name`."""
    reason = destinations.name_refusal(kind, name)
    if reason is not None:
        field = DESTINATION_FIELD[kind]
        raise _invalid(field, reason, field)


def check_rate_limit(rate_limit: float | None) -> None:
    """Raise 422 `validation-error` on `body.rate_limit` unless it is within the bounds."""
    reason = endpoints.rate_limit_refusal(rate_limit)
    if reason is not None:
        raise _invalid("rate_limit", reason, "rate_limit")


def _destination_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The endpoint columns of an API body: its `exchange` or `subject` as `destination`."""
    values = {k: v for k, v in fields.items() if k not in DESTINATION_FIELD.values()}
    named = [fields[f] for f in DESTINATION_FIELD.values() if fields.get(f) is not None]
    if named:
        values["destination"] = named[0]
    return values


def _checked_auth(
    kind: str, url: str, fields: Mapping[str, Any], *, allow_private: bool
) -> dict[str, Any]:
    """The body's `mtls` and `oauth2` among `fields` as `webhooks.endpoint_auth` checks them
    (None: removed), for an endpoint of `kind` at `url`; 422 `validation-error` if refused."""
    checked: dict[str, Any] = {}
    for field in ("mtls", "oauth2"):
        if fields.get(field) is not None and kind != endpoints.HTTP:
            raise _invalid(field, f"a {kind} endpoint takes no {field}", "kind")
    mtls = fields.get("mtls")
    if "mtls" in fields:
        if mtls is not None and URL(url).scheme != "https":
            raise _invalid("mtls", "a client certificate needs an https URL", "mtls")
        checked["mtls"] = mtls and endpoint_auth.client_certificate(**mtls)
    oauth2 = fields.get("oauth2")
    if "oauth2" in fields:
        try:
            checked["oauth2"] = oauth2 and endpoint_auth.oauth2(
                **oauth2, allow_private=allow_private
            )
        except ValueError as exc:
            raise _invalid("oauth2.token_url", str(exc), "url") from None
    return checked


async def _endpoint(conn: AsyncConnection, account_id: str, endpoint_id: str) -> Endpoint:
    row = await for_connection(conn).endpoint(conn, account_id, endpoint_id)
    if row is None:
        raise ProblemError("not-found", f"No webhook endpoint {endpoint_id}.")
    return row


async def _enabled_endpoint(conn: AsyncConnection, account_id: str, endpoint_id: str) -> Endpoint:
    row = await _endpoint(conn, account_id, endpoint_id)
    if not row.enabled:
        raise ProblemError("state-conflict", f"Webhook endpoint {endpoint_id} is disabled.")
    return row


async def read_endpoint(db: Database, account_id: str, endpoint_id: str) -> Endpoint:
    """One endpoint of the account; 404 when it has none by that id."""
    async with db.read() as conn:
        return await _endpoint(conn, account_id, endpoint_id)


async def endpoint_head(
    db: Database, account_id: str, endpoint_id: str
) -> tuple[Endpoint, Delivery | None]:
    """The endpoint and its oldest undelivered delivery in commit order (what a FIFO endpoint
    sends next, or waits on), as of one moment; 404 when the account has no such endpoint."""
    async with db.read(snapshot=True) as conn:
        row = await _endpoint(conn, account_id, endpoint_id)
        return row, await for_connection(conn).fifo_head(conn, endpoint_id)


async def checked_endpoint(fields: Mapping[str, Any], *, allow_private: bool) -> dict[str, Any]:
    """The columns `endpoints.new_endpoint` takes for `fields` (as the API's body), once its
    rate limit, broker destination and URL are checked: 422 `validation-error` if one is
    refused. The URL's host is looked up (no transaction should be open)."""
    values = _destination_fields(fields)
    kind = values.get("kind", endpoints.HTTP)
    check_rate_limit(values.get("rate_limit"))
    if kind in DESTINATION_FIELD:
        check_name(kind, values.get("destination") or "")
    await check_url(kind, values["url"], allow_private=allow_private)
    return values | _checked_auth(kind, values["url"], values, allow_private=allow_private)


async def create_endpoint(
    db: Database,
    box: SecretBox,
    account_id: str,
    fields: Mapping[str, Any],
    *,
    max_endpoints: int,
    allow_private: bool,
) -> tuple[Endpoint, Signer]:
    """Subscribe a URL or a broker destination (`fields` as the API's body: a broker's
    `exchange` or `subject`, the rest as `endpoints.create` takes them); the row and its secret."""
    values = await checked_endpoint(fields, allow_private=allow_private)
    async with db.unit_of_work() as uow:
        await quotas.reserve_endpoint(uow, account_id, max_endpoints)
        endpoint_id, secret = await endpoints.create(uow, box, account_id, **values)
        row = await _endpoint(uow.conn, account_id, endpoint_id)
    return row, secret


async def _new_destination(
    box: SecretBox, kind: str, endpoint_id: str, change: Mapping[str, Any], *, allow_private: bool
) -> dict[str, Any]:
    """The columns a change of a `kind` endpoint's URL, exchange or subject writes, checked.

    Only those it changes: a broker's sealed URL when the URL changes, its `destination` when
    the exchange or subject does, so two PATCHes of one and of the other both hold.
    """
    wrong = [f for k, f in DESTINATION_FIELD.items() if k != kind and change.get(f) is not None]
    if wrong:
        raise _invalid(wrong[0], f"a {kind} endpoint has no {wrong[0]}", "kind", f"not for {kind}")
    columns: dict[str, Any] = {}
    field = DESTINATION_FIELD.get(kind)
    name = None if field is None else change.get(field)
    if name is not None:
        check_name(kind, name)
        columns["destination"] = name
    url = change.get("url")
    if url is not None:
        await check_url(kind, url, allow_private=allow_private)
        if kind != endpoints.HTTP:
            columns |= endpoints.broker_columns(box, endpoint_id, url)
    return columns


async def update_endpoint(
    db: Database,
    box: SecretBox,
    account_id: str,
    endpoint_id: str,
    change: Mapping[str, Any],
    pre: Preconditions,
    *,
    allow_private: bool,
) -> Endpoint:
    """Change the fields in `change` if `pre` holds; `enabled` false disables, true enables a
    disabled endpoint (each emits its operational event, in the same transaction); `filter`
    None removes the payload filter.

    The change is one UPDATE of the columns it names, applied to the row as it is then: a
    concurrent change of other fields is kept. A new `url`, `exchange` or `subject` is checked
    first (outside the transaction: the URL's host is looked up), and a broker's URL sealed.
    """
    values = {k: v for k, v in change.items() if k not in DESTINATION_FIELD.values()}
    enabled = values.pop("enabled", None)
    if "rate_limit" in values:
        check_rate_limit(values["rate_limit"])
    if "events" in values:
        values["events"] = json.dumps(values["events"])
    if "filter" in values:
        values["filter"] = endpoints.stored_filter(values["filter"])
    authenticated: dict[str, Any] = {f: values.pop(f) for f in ("mtls", "oauth2") if f in values}
    if authenticated or any(
        change.get(f) is not None for f in ("url", *DESTINATION_FIELD.values())
    ):
        # The kind never changes, so it may be read apart from the write.
        stored = await read_endpoint(db, account_id, endpoint_id)
        values |= await _new_destination(
            box, stored.kind, endpoint_id, change, allow_private=allow_private
        )
        auth = _checked_auth(
            stored.kind,
            change.get("url") or stored.url,
            authenticated,
            allow_private=allow_private,
        )
        if "mtls" in auth:
            values |= endpoints.mtls_columns(box, endpoint_id, auth["mtls"])
        if "oauth2" in auth:
            values |= endpoints.oauth2_columns(box, endpoint_id, auth["oauth2"])
    values["updated_at"] = clock.now()
    async with db.unit_of_work() as uow:
        row, toggled = await for_database(db).change_endpoint(
            uow, account_id, endpoint_id, pre, values, enabled=enabled, reason=DISABLED_BY_REQUEST
        )
        if toggled and row.enabled:
            await endpoints.log_change(uow, row, ENDPOINT_ENABLED, ENABLED_BY_REQUEST)
        elif toggled:
            await endpoints.log_disabled(uow, row)
    return row


async def delete_endpoint(
    db: Database, account_id: str, endpoint_id: str, pre: Preconditions
) -> None:
    """Remove the endpoint if `pre` holds; its deliveries go with it, the events stay."""
    async with db.unit_of_work() as uow:
        await for_database(db).delete_endpoint(uow, account_id, endpoint_id, pre)


async def rotate_secret(
    db: Database, box: SecretBox, account_id: str, endpoint_id: str
) -> tuple[Endpoint, Signer]:
    """A new key of the endpoint's scheme; the old one keeps signing for 24 hours. The row and
    the new key."""
    async with db.unit_of_work() as uow:
        secret = await endpoints.rotate(
            uow, box, await _endpoint(uow.conn, account_id, endpoint_id)
        )
        row = await _endpoint(uow.conn, account_id, endpoint_id)
    return row, secret


async def send_test(db: Database, account_id: str, endpoint_id: str, *, per_minute: int) -> Event:
    """Send a `ping` to this endpoint alone, at most `per_minute` a minute; the event row."""
    async with db.unit_of_work() as uow:
        await _enabled_endpoint(uow.conn, account_id, endpoint_id)
        await quotas.reserve_ping(uow, account_id, per_minute)
        event_id = await emit(
            uow, account_id, PING, {"endpoint_id": endpoint_id}, endpoint_id=endpoint_id
        )
        return await for_database(db).event(uow.conn, event_id)


async def recover(db: Database, account_id: str, endpoint_id: str, since: datetime) -> int:
    """Send again every failed or dead delivery of the endpoint created since `since` (naive:
    UTC), but those of expunged events; how many."""
    since = since if since.tzinfo else since.replace(tzinfo=clock.now().tzinfo)
    async with db.unit_of_work() as uow:
        await _enabled_endpoint(uow.conn, account_id, endpoint_id)
        recovered = await for_database(db).resend_endpoint(
            uow, endpoint_id, RECOVERABLE, since, clock.now()
        )
        await wake(uow)
    return recovered


async def _delivery(conn: AsyncConnection, account_id: str, delivery_id: str) -> Delivery:
    row = await for_connection(conn).delivery(conn, account_id, delivery_id)
    if row is None:
        raise ProblemError("not-found", f"No delivery {delivery_id}.")
    return row


async def read_delivery(
    db: Database, account_id: str, delivery_id: str
) -> tuple[Delivery, list[Attempt]]:
    """One delivery of the account and its attempts, oldest first, as of one moment."""
    async with db.read(snapshot=True) as conn:
        row = await _delivery(conn, account_id, delivery_id)
        return row, await for_database(db).attempts(conn, delivery_id)


async def retry_delivery(db: Database, account_id: str, delivery_id: str) -> Delivery:
    """Send it again now, whatever its status (a new attempt; the count keeps growing); 409
    `event-expunged` if its event's payload is gone."""
    store = for_database(db)
    async with db.unit_of_work() as uow:
        row = await _delivery(uow.conn, account_id, delivery_id)
        refuse_expunged(await store.event(uow.conn, row.event_id))
        if not await store.retry(uow, row, transition(row.status, Change.RESEND), clock.now()):
            raise ProblemError(
                "state-conflict",
                f"Endpoint {row.endpoint_id} is disabled: enable it, then retry.",
            )
        await wake(uow)
        return await _delivery(uow.conn, account_id, delivery_id)
