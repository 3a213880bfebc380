"""Documents: versioned, keyed by (account, id), with a generation drawn at creation.

Revision ID: 0003
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("account_id", sa.String(40), sa.ForeignKey("accounts.id"), primary_key=True),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("generation", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("documents")
