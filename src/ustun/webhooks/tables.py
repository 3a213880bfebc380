"""Webhook tables: endpoints, the event log (the outbox), deliveries, attempts, receiver inbox
and reconcile cursors."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    text,
)

from ustun.store.tables import metadata
from ustun.store.types import UTCDateTime

# The claimable rows, as literal SQL: a partial index is only usable when the query repeats its
# predicate. A delivery has a next attempt exactly while its status is one of `states.DUE`: it
# is set when a delivery is queued, retried or resent, and cleared when it succeeds or dies.
DUE_PREDICATE = "next_attempt_at IS NOT NULL"
# The deliveries a worker holds: claimed (`next_attempt_at` is the lease's end) and not settled.
LEASED_PREDICATE = "lease_token IS NOT NULL"
# The events whose payload is still kept: the retention sweeper reads these by their index.
UNEXPUNGED_PREDICATE = "expunged_at IS NULL"
# `webhook_endpoints.ordering` of an endpoint that takes one delivery at a time, in commit order.
FIFO = "fifo"

endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    # `http`, or a broker (`rabbitmq`, `nats`: `webhooks.brokers`).
    Column("kind", String(16), nullable=False, server_default="http"),
    # The URL to show: a broker's without its credentials (the whole one is `broker_url`).
    Column("url", Text(), nullable=False),
    # A broker endpoint's exchange (RabbitMQ) or subject (NATS); null for HTTP.
    Column("destination", Text(), nullable=True),
    # A broker endpoint's whole URL, credentials and all, sealed like `secret`; null for HTTP.
    Column("broker_url", Text(), nullable=True),
    Column("description", Text(), nullable=False),
    # JSON list of event-type patterns: exact names, `payment.*` or `*`.
    Column("events", Text(), nullable=False),
    # The payload filter (`webhooks.filters`) as JSON text, null for none (migration 0021).
    Column("filter", Text(), nullable=True),
    Column("payload", String(8), nullable=False),
    Column("enabled", Boolean(), nullable=False),
    Column("disabled_reason", Text(), nullable=True),
    Column("rate_limit", Float(), nullable=True),
    Column("max_in_flight", Integer(), nullable=False),
    # `unordered` or `fifo` (one delivery at a time, in the commit order of the events).
    Column("ordering", String(16), nullable=False, server_default="unordered"),
    # A rate-limited endpoint's next free send slot, advanced by each claim (migration 0011).
    Column("next_send_at", UTCDateTime(), nullable=True),
    # `hmac-sha256` (`whsec_` secrets) or `ed25519` (`whsk_` keys; `public_key` is the `whpk_`).
    Column("signature", String(16), nullable=False, server_default="hmac-sha256"),
    Column("public_key", Text(), nullable=True),
    # AES-GCM ciphertexts (base64) of the signing keys; the previous one signs until it expires.
    Column("secret", Text(), nullable=False),
    Column("previous_secret", Text(), nullable=True),
    Column("previous_secret_expires_at", UTCDateTime(), nullable=True),
    # Mutual TLS (migration 0023, `webhooks.endpoint_auth`): the client certificate chain and
    # the authorities trusted for the receiver's certificate (PEM, public); the key, sealed.
    Column("mtls_certificate", Text(), nullable=True),
    Column("mtls_ca_bundle", Text(), nullable=True),
    Column("mtls_key", Text(), nullable=True),
    # OAuth2 client credentials: `{"token_url", "client_id", "scope"}` as JSON; the secret, sealed.
    Column("oauth2", Text(), nullable=True),
    Column("oauth2_secret", Text(), nullable=True),
    Column("failing_since", UTCDateTime(), nullable=True),
    # The circuit breaker (migration 0019, `webhooks.circuit`): consecutive failed attempts, and
    # while open the time of its probe (null: closed; later than now: open; passed: half-open).
    Column("circuit_failures", Integer(), nullable=False, server_default=text("0")),
    Column("circuit_open_until", UTCDateTime(), nullable=True),
    Column("version", Integer(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_webhook_endpoints_account_id_id", "account_id", "id"),
)

events = Table(
    "webhook_events",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    Column("type", String(100), nullable=False),
    Column("data", Text(), nullable=False),
    Column("object_url", Text(), nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    # The feed's commit-safe order `(txid, seq)`, both set by the database on insert (migration
    # 0010): on PostgreSQL the inserting transaction's id and a sequence, on SQLite 0 and a
    # trigger's max + 1 (writes are serialised there). See `webhooks.feed`.
    Column("txid", BigInteger(), nullable=False, server_default=text("0")),
    Column("seq", BigInteger(), nullable=True),
    # When retention (or a request) expunged its payload: `data` is then JSON `null`
    # (`records.EXPUNGED_DATA`), its id, type and times stay (migration 0018).
    Column("expunged_at", UTCDateTime(), nullable=True),
    # The W3C traceparent of the span that emitted it (`ustun.tracing`), null with tracing off:
    # each delivery attempt joins that trace (migration 0022).
    Column("traceparent", String(55), nullable=True),
    Index("ix_webhook_events_account_id_id", "account_id", "id"),
    Index("ix_webhook_events_account_id_type_id", "account_id", "type", "id"),
    Index("ix_webhook_events_seq", "seq", unique=True),
    Index("ix_webhook_events_account_id_txid_seq", "account_id", "txid", "seq"),
    # `since=` on the feed starts here (migration 0017), not at the account's first event.
    Index("ix_webhook_events_account_id_created_at", "account_id", "created_at"),
    # The events the retention sweeper has yet to expunge, oldest first (migration 0018).
    Index(
        "ix_webhook_events_unexpunged",
        "created_at",
        postgresql_where=text(UNEXPUNGED_PREDICATE),
        sqlite_where=text(UNEXPUNGED_PREDICATE),
    ),
)

deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    Column(
        "endpoint_id",
        String(40),
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event_id", String(40), ForeignKey("webhook_events.id"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt_count", Integer(), nullable=False),
    # When due; while a worker holds the delivery, the end of its lease.
    Column("next_attempt_at", UTCDateTime(), nullable=True),
    Column("lease_token", String(40), nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # Only the deliveries a dispatcher may claim, in due order: claims read it top-down.
    Index(
        "ix_webhook_deliveries_due",
        "next_attempt_at",
        postgresql_where=text(DUE_PREDICATE),
        sqlite_where=text(DUE_PREDICATE),
    ),
    # Each endpoint's deliveries in due order (settled ones, with none, last), and its leased
    # ones: a claim reads only these.
    Index("ix_webhook_deliveries_endpoint_id_next_attempt_at", "endpoint_id", "next_attempt_at"),
    Index(
        "ix_webhook_deliveries_leased",
        "endpoint_id",
        "next_attempt_at",
        postgresql_where=text(LEASED_PREDICATE),
        sqlite_where=text(LEASED_PREDICATE),
    ),
    Index("ix_webhook_deliveries_account_id_id", "account_id", "id"),
    Index("ix_webhook_deliveries_event_id", "event_id"),
)

attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", String(40), primary_key=True),
    # No foreign key (migration 0013): its check cost a locking lookup per attempt recorded.
    # Settling records attempts only of deliveries that exist; deleting an endpoint deletes them.
    Column("delivery_id", String(40), nullable=False, index=True),
    Column("attempted_at", UTCDateTime(), nullable=False),
    Column("status_code", Integer(), nullable=True),
    Column("latency_ms", Float(), nullable=False),
    Column("error", Text(), nullable=True),
    Column("response", Text(), nullable=True),
)

inbox = Table(
    "webhook_inbox",
    metadata,
    # The UNIQUE key that makes a receiver run each event's handler once.
    Column("webhook_id", String(255), primary_key=True),
    Column("type", String(100), nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    Column("handled_at", UTCDateTime(), nullable=True),
    Column("handler_attempts", Integer(), nullable=False),
    Column("last_error", Text(), nullable=True),
)

reconcile_cursors = Table(
    "webhook_reconcile_cursors",
    metadata,
    # Which provider's feed (its API base URL, or a name the receiver chose).
    Column("source", String(255), primary_key=True),
    # The feed's opaque `next_cursor`: every event before it has been handled.
    Column("cursor", String(255), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
)
