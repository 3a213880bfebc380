"""Endpoint authentication: a TLS client certificate and OAuth2 client credentials.

`webhook_endpoints` gains the client certificate chain and the authorities to trust for the
receiver (PEM, public), the private key (sealed like the signing secrets), OAuth2's token URL,
client id and scope (JSON) and its client secret (sealed). Plain `ADD COLUMN`s, all nullable:
no table is rebuilt, no endpoint changes.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_COLUMNS = ("mtls_certificate", "mtls_ca_bundle", "mtls_key", "oauth2", "oauth2_secret")


def upgrade() -> None:
    for name in _COLUMNS:
        op.add_column("webhook_endpoints", sa.Column(name, sa.Text(), nullable=True))


def downgrade() -> None:
    for name in reversed(_COLUMNS):
        op.drop_column("webhook_endpoints", name)
