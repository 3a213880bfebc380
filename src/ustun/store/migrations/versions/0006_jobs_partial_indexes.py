"""Jobs: index only the rows each lookup can match, so the queue's writes touch fewer indexes.

`ix_jobs_completed_at` (the retention purge) now holds finished jobs only and
`ix_jobs_account_id_id` (an account's job list) jobs of an account only: enqueueing and claiming
a job add no entry to either (a claim's UPDATE is never HOT, as `status` is indexed).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# (name, columns, the rows it holds)
_PARTIAL = (
    ("ix_jobs_completed_at", ["completed_at"], "completed_at IS NOT NULL"),
    ("ix_jobs_account_id_id", ["account_id", "id"], "account_id IS NOT NULL"),
)


def upgrade() -> None:
    for name, columns, rows in _PARTIAL:
        op.drop_index(name, table_name="jobs")
        op.create_index(
            name, "jobs", columns, postgresql_where=sa.text(rows), sqlite_where=sa.text(rows)
        )


def downgrade() -> None:
    for name, columns, _ in _PARTIAL:
        op.drop_index(name, table_name="jobs")
        op.create_index(name, "jobs", columns)
