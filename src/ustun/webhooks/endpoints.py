"""Endpoint operations shared by the API and the dispatcher: create, rotate, disable, sign."""

from __future__ import annotations

import json
import math
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from ustun import clock, ids
from ustun.defaults import DEFAULT_ENDPOINT_MAX_IN_FLIGHT
from ustun.http.signature import Signer, signer
from ustun.store import UnitOfWork
from ustun.store.accounts import account_id as named_account
from ustun.store.dbapi import DbapiConnection
from ustun.store.plans import run_sync
from ustun.webhooks import endpoint_auth, filters, signing
from ustun.webhooks.adapters import for_connection
from ustun.webhooks.adapters import plans as webhook_plans
from ustun.webhooks.brokers.destinations import Destination, redact
from ustun.webhooks.endpoint_auth import ClientCertificate, OAuth2
from ustun.webhooks.operational import ENDPOINT_DISABLED
from ustun.webhooks.records import Endpoint
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.sending.quotas import check_endpoint_room
from ustun.webhooks.store import cap

HTTP = "http"
# How an endpoint takes its deliveries: as many at once as `max_in_flight` allows, in any order,
# or `fifo`: one at a time, in the commit order of their events.
Ordering = Literal["unordered", "fifo"]
UNORDERED: Ordering = "unordered"
ROTATION_OVERLAP = timedelta(hours=24)
# `rate_limit` bounds, in sends/s: the dispatcher paces sends `1 / rate_limit` s apart, so a
# tiny rate is a step of centuries that overflows its clock; one send per 100 s is the slowest
# (migration 0014 raised the smaller ones stored before).
MIN_RATE_LIMIT = 0.01
MAX_RATE_LIMIT = 10_000.0


def rate_limit_refusal(rate_limit: float | None) -> str | None:
    """Why `rate_limit` may not be an endpoint's (None: no limit), or None when it may."""
    if rate_limit is None:
        return None
    if not math.isfinite(rate_limit):
        return "the rate limit must be a finite number"
    if not MIN_RATE_LIMIT <= rate_limit <= MAX_RATE_LIMIT:
        return f"the rate limit must be {MIN_RATE_LIMIT:g} to {MAX_RATE_LIMIT:g} sends per second"
    return None


@dataclass(frozen=True, slots=True)
class Target:
    """What the dispatcher needs to send to an endpoint, valid while `version` is current."""

    id: str
    account_id: str
    url: str
    payload: str
    enabled: bool
    rate_limit: float | None
    signing: tuple[Signer, ...]
    version: int
    # When the previous secret in `signing` stops signing; None if it is not there.
    signing_until: datetime | None
    # Where a broker endpoint publishes (its URL decrypted); None for HTTP.
    destination: Destination | None = None
    # How many of its deliveries may be in flight at once, across every worker (1 if FIFO).
    room: int = DEFAULT_ENDPOINT_MAX_IN_FLIGHT
    # Its own TLS context (a client certificate, authorities to trust), and OAuth2 credentials.
    tls: ssl.SSLContext | None = None
    oauth2: OAuth2 | None = None

    def current(self, version: int, now: datetime) -> bool:
        """Whether this is still right for the endpoint at `version`, at `now`."""
        return version == self.version and (self.signing_until is None or now < self.signing_until)


def signing_secrets(box: SecretBox, row: Endpoint, now: datetime) -> tuple[Signer, ...]:
    """The current key (secret or ed25519), plus the previous one while its 24 h overlap lasts."""
    found = [signer(box.open(row.secret, context=row.id))]
    expires = row.previous_secret_expires_at
    if row.previous_secret is not None and expires is not None and expires > now:
        found.append(signer(box.open(row.previous_secret, context=row.id)))
    return tuple(found)


def destination(box: SecretBox, row: Endpoint) -> Destination | None:
    """A broker endpoint's destination, its URL decrypted; None for an HTTP endpoint."""
    if row.kind == HTTP:
        return None
    if row.broker_url is None or row.destination is None:
        raise ValueError(f"broker endpoint {row.id} lacks its URL or destination")
    return Destination(row.kind, box.open(row.broker_url, context=row.id), row.destination)


def client_certificate(box: SecretBox, row: Endpoint) -> ClientCertificate | None:
    """The endpoint's client certificate, its key decrypted; None without one."""
    if row.mtls_certificate is None or row.mtls_key is None:
        return None
    key = box.open(row.mtls_key, context=row.id)
    return ClientCertificate(row.mtls_certificate, key, row.mtls_ca_bundle)


def oauth2_credentials(box: SecretBox, row: Endpoint) -> OAuth2 | None:
    """The endpoint's OAuth2 client credentials, the secret decrypted; None without them."""
    if row.oauth2 is None or row.oauth2_secret is None:
        return None
    shown = json.loads(row.oauth2)
    return OAuth2(
        shown["token_url"],
        shown["client_id"],
        box.open(row.oauth2_secret, context=row.id),
        shown.get("scope"),
    )


def mtls_columns(
    box: SecretBox, endpoint_id: str, cert: ClientCertificate | None
) -> dict[str, Any]:
    """The columns of an endpoint's client certificate (all None: none), its key sealed."""
    return {
        "mtls_certificate": cert and cert.certificate,
        "mtls_ca_bundle": cert and cert.ca_bundle,
        "mtls_key": cert and box.seal(cert.private_key, context=endpoint_id),
    }


def oauth2_columns(box: SecretBox, endpoint_id: str, creds: OAuth2 | None) -> dict[str, Any]:
    """The columns of an endpoint's OAuth2 credentials (both None: none), the secret sealed."""
    if creds is None:
        return {"oauth2": None, "oauth2_secret": None}
    shown = {"token_url": creds.token_url, "client_id": creds.client_id, "scope": creds.scope}
    return {
        "oauth2": json.dumps(shown),
        "oauth2_secret": box.seal(creds.client_secret, context=endpoint_id),
    }


def target(box: SecretBox, row: Endpoint, now: datetime) -> Target:
    """An endpoint row, decrypted for sending."""
    signing = signing_secrets(box, row, now)
    cert = client_certificate(box, row)
    return Target(
        row.id,
        row.account_id,
        row.url,
        row.payload,
        row.enabled,
        row.rate_limit,
        signing,
        row.version,
        row.previous_secret_expires_at if len(signing) > 1 else None,
        destination(box, row),
        cap(row.ordering, row.max_in_flight),
        None if cert is None else endpoint_auth.ssl_context(cert),
        oauth2_credentials(box, row),
    )


def broker_columns(box: SecretBox, endpoint_id: str, url: str) -> dict[str, str]:
    """The URL columns of a broker endpoint: shown without credentials, and sealed whole."""
    return {"url": redact(url), "broker_url": box.seal(url, context=endpoint_id)}


def new_endpoint(
    box: SecretBox,
    account_id: str,
    *,
    url: str,
    events: Sequence[str],
    kind: str = HTTP,
    destination: str | None = None,
    description: str = "",
    payload: str = "full",
    rate_limit: float | None = None,
    max_in_flight: int = DEFAULT_ENDPOINT_MAX_IN_FLIGHT,
    signature: signing.Scheme = signing.HMAC_SHA256,
    ordering: Ordering = UNORDERED,
    filter: Mapping[str, Any] | None = None,
    mtls: ClientCertificate | None = None,
    oauth2: OAuth2 | None = None,
) -> tuple[dict[str, Any], Signer]:
    """The row of a new endpoint with a fresh signing key (sealed in it), and the key (shown
    once); `webhooks.adapters.plans.insert_endpoint` writes it on any connection.

    A broker endpoint (`kind` rabbitmq or nats) publishes to `destination` at `url`; with a
    payload `filter` (`webhooks.filters`) it gets only the events whose data passes it; `mtls`
    and `oauth2` (checked by `webhooks.endpoint_auth`) authenticate its requests.
    `ValueError` if `rate_limit` is out of bounds (`rate_limit_refusal`), `filters.FilterError`
    (a `ValueError`) if `filter` is refused.
    """
    refused = rate_limit_refusal(rate_limit)
    if refused is not None:
        raise ValueError(refused)
    endpoint_id = ids.new_id("we")
    secret = signing.new_key(signature)
    now = clock.now()
    urls = {"url": url} if kind == HTTP else broker_columns(box, endpoint_id, url)
    row = dict(
        id=endpoint_id,
        account_id=account_id,
        kind=kind,
        destination=destination,
        **urls,
        description=description,
        events=json.dumps(list(events)),
        filter=stored_filter(filter),
        payload=payload,
        enabled=True,
        rate_limit=rate_limit,
        max_in_flight=max_in_flight,
        ordering=ordering,
        circuit_failures=0,
        version=1,
        signature=signature,
        public_key=signing.public_key(secret),
        secret=box.seal(str(secret), context=endpoint_id),
        **mtls_columns(box, endpoint_id, mtls),
        **oauth2_columns(box, endpoint_id, oauth2),
        created_at=now,
        updated_at=now,
    )
    return row, secret


def stored_filter(given: Mapping[str, Any] | None) -> str | None:
    """The `filter` column of a payload filter as a caller gives it: its checked text, or None
    for none (`filters.FilterError` if it is refused)."""
    return None if given is None else filters.parse(given).text


class NewEndpoint(NamedTuple):
    """An endpoint just registered: its id and its signing secret, shown this once."""

    id: str
    secret: str


def insert_on(
    conn: DbapiConnection,
    box: SecretBox,
    account: str,
    values: Mapping[str, Any],
    *,
    max_endpoints: int,
) -> NewEndpoint:
    """Register an endpoint of the account named `account` (made on first use) on a host
    framework's connection, in the transaction it has open: `values` the columns
    `operations.checked_endpoint` checked; 429 `quota-exceeded` when the account has
    `max_endpoints` already."""
    owner = run_sync(named_account(account), conn)
    check_endpoint_room(run_sync(webhook_plans.endpoints_held(owner), conn), max_endpoints)
    row, secret = new_endpoint(box, owner, **values)
    run_sync(webhook_plans.insert_endpoint(row), conn)
    return NewEndpoint(row["id"], str(secret))


async def create(
    uow: UnitOfWork, box: SecretBox, account_id: str, **fields: Any
) -> tuple[str, Signer]:
    """Insert an endpoint (`fields` as `new_endpoint` takes them) with a fresh signing key;
    return its id and the key (shown once)."""
    row, secret = new_endpoint(box, account_id, **fields)
    await for_connection(uow.conn).insert_endpoint(uow, row)
    return row["id"], secret


async def rotate(uow: UnitOfWork, box: SecretBox, row: Endpoint) -> Signer:
    """Give the endpoint a new key of its scheme; the old one keeps signing for
    `ROTATION_OVERLAP`."""
    secret = signing.new_key(row.signature)
    now = clock.now()
    await for_connection(uow.conn).rotate_secret(
        uow,
        row.id,
        secret=box.seal(str(secret), context=row.id),
        public_key=signing.public_key(secret),
        previous=row.secret,
        previous_expires_at=now + ROTATION_OVERLAP,
        now=now,
    )
    return secret


async def disable(uow: UnitOfWork, endpoint_id: str, reason: str) -> bool:
    """Disable an enabled endpoint and log `endpoint.disabled`; False if it already was."""
    row = await for_connection(uow.conn).disable_endpoint(uow, endpoint_id, reason, clock.now())
    if row is None:
        return False
    await log_disabled(uow, row)
    return True


async def log_disabled(uow: UnitOfWork, row: Endpoint) -> None:
    """Log `endpoint.disabled` for an endpoint row this unit of work has just disabled."""
    await log_change(uow, row, ENDPOINT_DISABLED, row.disabled_reason or "")


async def log_change(uow: UnitOfWork, row: Endpoint, event_type: str, reason: str) -> None:
    """Emit the operational event `event_type` about the endpoint `row` this unit of work has
    just changed, on its transaction: it is sent iff the change commits."""
    data = {"id": row.id, "object": "webhook_endpoint", "url": row.url, "reason": reason}
    await emit(uow, row.account_id, event_type, data)
