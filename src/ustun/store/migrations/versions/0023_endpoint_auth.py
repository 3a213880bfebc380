"""Client certificates and OAuth2 credentials of webhook endpoints (filled in by its change).

Revision ID: 0023
Revises: 0022
"""

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
