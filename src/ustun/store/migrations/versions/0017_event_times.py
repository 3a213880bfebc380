"""Events indexed by account and creation time: `since=` on the feed is resolved by index.

A feed read with `since` walked the account's events in feed order from `after` and dropped
those created before `since`: with `after` at the start, every event of the account's history
was read to return the last few. `ix_webhook_events_account_id_created_at` lets the read start
at `since` and touch only the events created since.

Revision ID: 0017
Revises: 0016
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_webhook_events_account_id_created_at", "webhook_events", ["account_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_events_account_id_created_at", table_name="webhook_events")
