"""Tables every layer shares: tenancy (accounts, their API keys, dashboard and portal sessions),
metadata.

Pillars and the service declare their own tables on this `metadata`; the schema itself only
changes through migrations in `ustun/store/migrations/versions/`.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, ForeignKey, MetaData, String, Table, Text, false

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
    # Updated at most once a minute per key (`service.plumbing.accounts.LAST_USED_GRANULARITY`).
    Column("last_used_at", UTCDateTime(), nullable=True),
    # A revoked key is kept (listed, never accepted again).
    Column("revoked_at", UTCDateTime(), nullable=True),
    # An operator key may also open and revoke consumer portal sessions of any account.
    Column("operator", Boolean(), nullable=False, server_default=false()),
)

# One row per dashboard login; logout deletes it, revoking its key ends it.
dashboard_sessions = Table(
    "dashboard_sessions",
    metadata,
    # SHA-256 of the session id the signed cookie carries (256 random bits, like a key).
    Column("id_hash", String(64), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False),
    Column("api_key_id", String(40), ForeignKey("api_keys.id"), nullable=False, index=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False, index=True),
)

# One row per consumer portal link (`ustun.portal`): revocable, it ends at `expires_at`.
portal_sessions = Table(
    "portal_sessions",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=False, index=True),
    # SHA-256 of the link's token (256 random bits, like a key): the token itself is not kept.
    Column("token_hash", String(64), nullable=False, unique=True),
    # The event types the link may subscribe to, as a JSON list; NULL: the whole catalogue.
    Column("event_types", Text(), nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("revoked_at", UTCDateTime(), nullable=True),
    # The operator key that opened it (None: opened through the library, `ustun.portal.link`).
    Column("created_by", String(40), ForeignKey("api_keys.id"), nullable=True),
)
