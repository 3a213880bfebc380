"""Broker destinations: a webhook endpoint's `kind` and its exchange or subject.

- `webhook_endpoints.kind`: `http` (existing endpoints), `rabbitmq` or `nats`.
- `webhook_endpoints.destination`: the exchange (RabbitMQ) or subject (NATS); null for HTTP.
- `webhook_endpoints.broker_url`: a broker endpoint's URL, which may carry credentials, sealed
  by the secret box and bound to the endpoint id like its signing secrets; `url` then holds the
  URL without its credentials, to show. Null for HTTP.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="http"))
        batch.add_column(sa.Column("destination", sa.Text(), nullable=True))
        batch.add_column(sa.Column("broker_url", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("broker_url")
        batch.drop_column("destination")
        batch.drop_column("kind")
