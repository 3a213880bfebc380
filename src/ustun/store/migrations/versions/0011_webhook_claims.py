"""Webhook claims by endpoint: cluster-wide in-flight caps and rate limits, FIFO endpoints.

- `webhook_endpoints.ordering` (`unordered` | `fifo`) and `next_send_at` (the earliest time the
  next send of a rate-limited endpoint may go; advanced by each claim under the endpoint's lock).
- `ix_webhook_deliveries_endpoint_id_next_attempt_at` replaces `ix_webhook_deliveries_endpoint_id`:
  a claim takes each ready endpoint's soonest due rows from its range, so it never walks another
  endpoint's backlog. Not partial, so it still serves the cascade from `webhook_endpoints`, and
  it is the only index led by `endpoint_id` (next to a single-column one, the planner read a
  backlogged endpoint's every entry through that instead).
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

_BY_ENDPOINT = "ix_webhook_deliveries_endpoint_id_next_attempt_at"
_LEASED = "ix_webhook_deliveries_leased"


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(
            sa.Column("ordering", sa.String(16), nullable=False, server_default="unordered")
        )
        batch.add_column(sa.Column("next_send_at", UTCDateTime(), nullable=True))
    op.create_index(_BY_ENDPOINT, "webhook_deliveries", ["endpoint_id", "next_attempt_at"])
    op.drop_index("ix_webhook_deliveries_endpoint_id", table_name="webhook_deliveries")
    op.create_index(
        _LEASED,
        "webhook_deliveries",
        ["endpoint_id", "next_attempt_at"],
        postgresql_where=sa.text("lease_token IS NOT NULL"),
        sqlite_where=sa.text("lease_token IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(_LEASED, table_name="webhook_deliveries")
    op.create_index("ix_webhook_deliveries_endpoint_id", "webhook_deliveries", ["endpoint_id"])
    op.drop_index(_BY_ENDPOINT, table_name="webhook_deliveries")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("next_send_at")
        batch.drop_column("ordering")
