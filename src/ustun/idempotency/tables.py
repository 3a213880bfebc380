"""The idempotency records, and each scope's bytes of stored answers, on the shared metadata."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, String, Table, Text

from ustun.store.tables import metadata
from ustun.store.types import UTCDateTime

idempotency_records = Table(
    "idempotency_records",
    metadata,
    # The tenant the key belongs to (the service uses the account id); keys never cross scopes.
    Column("scope", String(64), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("lease_token", String(32), nullable=False),
    Column("locked_until", UTCDateTime(), nullable=False),
    Column("status", Integer(), nullable=True),
    Column("headers", Text(), nullable=True),
    Column("body", LargeBinary(), nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Index("ix_idempotency_records_expires_at", "expires_at"),
)

# Bytes of stored answers (headers and body) per scope, kept by triggers on the records in the
# same transaction as each write (migration 0016). A scope's total is the sum of its shards: on
# PostgreSQL each connection adds to its own (its backend pid modulo 16), so that concurrent
# commits of one scope never queue on one row; on SQLite, which writes one at a time, shard 0.
idempotency_usage = Table(
    "idempotency_usage",
    metadata,
    Column("scope", String(64), primary_key=True),
    Column("shard", Integer(), primary_key=True, autoincrement=False),
    Column("bytes", BigInteger(), nullable=False),
)
