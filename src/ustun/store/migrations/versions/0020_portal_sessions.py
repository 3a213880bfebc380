"""Consumer portal sessions and operator keys.

`portal_sessions` holds one row per portal link, keyed by the SHA-256 of its token (the token
itself is never stored), with the account it is for, the event types it may subscribe to
(JSON, NULL for all), when it ends and whether it was revoked. `api_keys.operator` marks the
keys that may open and revoke such sessions for any account (`ustun keys create --operator`).

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("operator", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "portal_sessions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(40), sa.ForeignKey("accounts.id"), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("event_types", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("created_by", sa.String(40), sa.ForeignKey("api_keys.id"), nullable=True),
    )
    op.create_index("ix_portal_sessions_account_id", "portal_sessions", ["account_id"])


def downgrade() -> None:
    op.drop_table("portal_sessions")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("operator")
