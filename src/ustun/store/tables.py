"""Tables every layer shares: tenancy (accounts and their API keys) and the metadata object.

Pillars and the service declare their own tables on this `metadata`; the schema itself only
changes through migrations in `ustun/store/migrations/versions/`.
"""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, MetaData, String, Table

from ustun.store.types import UTCDateTime

metadata = MetaData()

accounts = Table(
    "accounts",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(100), nullable=False, unique=True),
    Column("created_at", UTCDateTime(), nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False, index=True),
    # SHA-256 of the key: keys are 256-bit random, so a fast hash cannot be brute-forced.
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(20), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)
