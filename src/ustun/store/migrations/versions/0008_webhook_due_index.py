"""Webhooks: the due-deliveries index holds the rows with a next attempt, not a status list.

`next_attempt_at` is null exactly when a delivery succeeded or died, so the rows are the same.
The planner's default guess for `status IN (...)` on a table it has not analysed yet (a fresh
install, or a burst queued in one commit) is a few rows, and it then claimed by sorting every
due row instead of reading the index in order; its guess for `IS NOT NULL` is nearly all rows.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _due_index(rows: str) -> None:
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text(rows),
        sqlite_where=sa.text(rows),
    )


def upgrade() -> None:
    _due_index("next_attempt_at IS NOT NULL")


def downgrade() -> None:
    _due_index("status IN ('pending', 'failed')")
