"""Webhook claims by endpoint: cluster-wide in-flight caps and rate limits, FIFO endpoints.

- `webhook_endpoints.ordering` (`unordered` | `fifo`) and `next_send_at` (the earliest time the
  next send of a rate-limited endpoint may go; advanced by each claim under the endpoint's lock).
- `ix_webhook_deliveries_endpoint_due` (`endpoint_id, next_attempt_at` over the rows with a next
  attempt): a claim takes each ready endpoint's soonest due rows from it, so it never walks
  another endpoint's backlog.
- `ix_webhook_deliveries_leased` (`endpoint_id, next_attempt_at` over the rows holding a lease):
  how many deliveries an endpoint has in flight, counted without reading its backlog.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_webhook_deliveries_endpoint_due": "next_attempt_at IS NOT NULL",
    "ix_webhook_deliveries_leased": "lease_token IS NOT NULL",
}


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(
            sa.Column("ordering", sa.String(16), nullable=False, server_default="unordered")
        )
        batch.add_column(sa.Column("next_send_at", UTCDateTime(), nullable=True))
    for name, rows in _INDEXES.items():
        op.create_index(
            name,
            "webhook_deliveries",
            ["endpoint_id", "next_attempt_at"],
            postgresql_where=sa.text(rows),
            sqlite_where=sa.text(rows),
        )


def downgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="webhook_deliveries")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("next_send_at")
        batch.drop_column("ordering")
