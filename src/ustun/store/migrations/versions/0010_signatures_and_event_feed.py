"""ed25519 endpoint signatures, the commit-safe event feed, and receivers' reconcile cursors.

- `webhook_endpoints.signature` (`hmac-sha256` | `ed25519`) and `public_key` (the `whpk_…` of an
  ed25519 endpoint; its private `whsk_…` is sealed in `secret` like an HMAC secret).
- `webhook_events.txid` and `seq`: the feed's order, `(txid, seq)`. On PostgreSQL `txid` is the
  inserting transaction's id (`pg_current_xact_id()`) and `seq` comes from a sequence; the feed
  only reads below the oldest transaction still running, where no row can appear any more. On
  SQLite writes are serialised, so `seq` (the largest so far plus one, set by a trigger in the
  writing transaction) is commit-ordered and `txid` stays 0. Existing events keep id order.
- `webhook_reconcile_cursors`: where a receiver's `Reconciler` is in each provider's feed.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Existing events in id order (ids are time-ordered), numbered from 1.
_NUMBER_EXISTING = """UPDATE webhook_events SET seq = numbered.n
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM webhook_events) AS numbered
WHERE webhook_events.id = numbered.id"""
_PG_SEQUENCE = [
    "CREATE SEQUENCE webhook_events_seq OWNED BY webhook_events.seq",
    "SELECT setval('webhook_events_seq', COALESCE(MAX(seq), 0) + 1, false) FROM webhook_events",
    "ALTER TABLE webhook_events ALTER COLUMN seq SET DEFAULT nextval('webhook_events_seq'), "
    "ALTER COLUMN seq SET NOT NULL, "
    "ALTER COLUMN txid SET DEFAULT (pg_current_xact_id()::text::bigint)",
]
_SQLITE_TRIGGER = """CREATE TRIGGER webhook_events_seq AFTER INSERT ON webhook_events
WHEN NEW.seq IS NULL BEGIN
  UPDATE webhook_events SET seq = (SELECT COALESCE(MAX(seq), 0) + 1 FROM webhook_events)
  WHERE rowid = NEW.rowid;
END"""


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(
            sa.Column("signature", sa.String(16), nullable=False, server_default="hmac-sha256")
        )
        batch.add_column(sa.Column("public_key", sa.Text(), nullable=True))
    op.add_column(
        "webhook_events",
        sa.Column("txid", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("webhook_events", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.execute(_NUMBER_EXISTING)
    if op.get_context().dialect.name == "postgresql":
        for statement in _PG_SEQUENCE:
            op.execute(statement)
    else:
        op.execute(_SQLITE_TRIGGER)
    op.create_index("ix_webhook_events_seq", "webhook_events", ["seq"], unique=True)
    op.create_index(
        "ix_webhook_events_account_id_txid_seq", "webhook_events", ["account_id", "txid", "seq"]
    )
    op.create_table(
        "webhook_reconcile_cursors",
        sa.Column("source", sa.String(255), primary_key=True),
        sa.Column("cursor", sa.String(255), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_reconcile_cursors")
    op.drop_index("ix_webhook_events_account_id_txid_seq", table_name="webhook_events")
    op.drop_index("ix_webhook_events_seq", table_name="webhook_events")
    if op.get_context().dialect.name != "postgresql":
        op.execute("DROP TRIGGER webhook_events_seq")
    with op.batch_alter_table("webhook_events") as batch:
        batch.drop_column("seq")
        batch.drop_column("txid")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("public_key")
        batch.drop_column("signature")
