"""Tables of the reference service's business resources."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, ForeignKey, Integer, String, Table, Text

from ustun.store.tables import metadata
from ustun.store.types import UTCDateTime

payments = Table(
    "payments",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    Column("amount", BigInteger(), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("order_id", BigInteger(), nullable=True),
    Column("description", Text(), nullable=True),
    Column("status", String(16), nullable=False),
    Column("version", Integer(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
)

ledger_accounts = Table(
    "ledger_accounts",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("balance", BigInteger(), nullable=False),
    Column("version", Integer(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

transfers = Table(
    "transfers",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    Column("from_id", String(40), ForeignKey("ledger_accounts.id"), nullable=False),
    Column("to_id", String(40), ForeignKey("ledger_accounts.id"), nullable=False),
    Column("amount", BigInteger(), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

# Keyed by (account, id): a client may choose a document's id with `PUT … If-None-Match: *`.
documents = Table(
    "documents",
    metadata,
    Column("account_id", String(40), ForeignKey("accounts.id"), primary_key=True),
    Column("id", String(64), primary_key=True),
    Column("title", Text(), nullable=False),
    Column("body", Text(), nullable=False),
    Column("version", Integer(), nullable=False),
    Column("generation", String(16), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
)
