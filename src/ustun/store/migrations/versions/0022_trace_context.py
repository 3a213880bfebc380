"""Trace context stored with jobs and events.

`jobs.traceparent` and `webhook_events.traceparent` hold the W3C `traceparent` of the span that
enqueued the job or emitted the event (`ustun.tracing`), so the job's run and each delivery
attempt of the event join the trace of the request that caused them; null when tracing is off.
A plain `ADD COLUMN` on both databases: no table is rebuilt.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

TABLES = ("jobs", "webhook_events")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, "traceparent")
