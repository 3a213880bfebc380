"""Webhook payload retention: an event's payload can be expunged, its record kept.

`webhook_events.expunged_at` says when the payload went (retention's sweeper, or
`POST /v1/events/{id}/expunge`); `data` is then JSON `null`. The sweeper reads the events it
has yet to expunge, oldest first, by `ix_webhook_events_unexpunged` (a partial index on
`created_at`: expunged events leave it, so a sweep never walks the history it already did).
A plain `ADD COLUMN` on both databases: no table is rebuilt (SQLite's feed trigger stays).

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_UNEXPUNGED = "ix_webhook_events_unexpunged"


def upgrade() -> None:
    op.add_column("webhook_events", sa.Column("expunged_at", UTCDateTime(), nullable=True))
    op.create_index(
        _UNEXPUNGED,
        "webhook_events",
        ["created_at"],
        postgresql_where=sa.text("expunged_at IS NULL"),
        sqlite_where=sa.text("expunged_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(_UNEXPUNGED, table_name="webhook_events")
    op.drop_column("webhook_events", "expunged_at")
