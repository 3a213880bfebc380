"""Pending jobs indexed by account: a fair claim takes turns across accounts.

`ix_jobs_pending_queue` orders pending jobs by queue (the account, '' for none), then run time:
a claim finds the accounts with pending jobs by skipping from one to the next and reads only
the head of each, where `ix_jobs_pending_run_at` made it take the oldest due jobs of all
accounts, so one account's backlog went first. It replaces `ix_jobs_pending_run_at` (a job
still adds one entry when enqueued).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.drop_index("ix_jobs_pending_run_at", table_name="jobs")
    op.create_index(
        "ix_jobs_pending_queue",
        "jobs",
        [sa.text("coalesce(account_id, '')"), "run_at", "id"],
        postgresql_where=_PENDING,
        sqlite_where=_PENDING,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_pending_queue", table_name="jobs")
    op.create_index(
        "ix_jobs_pending_run_at",
        "jobs",
        ["run_at", "id"],
        postgresql_where=_PENDING,
        sqlite_where=_PENDING,
    )
