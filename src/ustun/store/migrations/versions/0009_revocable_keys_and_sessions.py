"""Revocable API keys and dashboard sessions.

`api_keys` gains `last_used_at` and `revoked_at` (a revoked key stays listed, never accepted);
`dashboard_sessions` holds one row per dashboard login, keyed by the SHA-256 of the session id
its signed cookie carries, so that logout and key revocation end a session server-side.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("revoked_at", UTCDateTime(), nullable=True))
    op.create_table(
        "dashboard_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("account_id", sa.String(40), sa.ForeignKey("accounts.id"), nullable=False),
        sa.Column("api_key_id", sa.String(40), sa.ForeignKey("api_keys.id"), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_dashboard_sessions_api_key_id", "dashboard_sessions", ["api_key_id"])
    op.create_index("ix_dashboard_sessions_expires_at", "dashboard_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("dashboard_sessions")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("last_used_at")
