"""Payload filters on webhook endpoints.

`webhook_endpoints.filter` holds an endpoint's payload filter as JSON text
(`ustun.webhooks.filters`: checked at registration, stored compact with non-ASCII escaped), or
null for none: the endpoint then gets every event its `events` patterns select, as before.
A plain `ADD COLUMN` on both databases: no table is rebuilt.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("webhook_endpoints", sa.Column("filter", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_endpoints", "filter")
