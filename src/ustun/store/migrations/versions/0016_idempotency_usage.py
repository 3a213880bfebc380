"""Each scope's bytes of stored idempotent answers, for the per-account quota.

`idempotency_usage` holds the bytes of the stored answers (headers and body) of each scope,
added and subtracted by triggers on `idempotency_records` in the same statement as the record's
insert, update or delete, so no write can miss it. On PostgreSQL each connection adds to a
shard of its own (its backend pid modulo 16), so that concurrent commits of one account do not
queue on one row; a scope's total is the sum of its shards. It starts with the answers already
stored.

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_PG_SIZE = "coalesce(octet_length({row}.body), 0) + coalesce(octet_length({row}.headers), 0)"
# Headers are stored as ASCII JSON, so SQLite's length() (characters for text) counts bytes.
_SQLITE_SIZE = "coalesce(length({row}.body), 0) + coalesce(length({row}.headers), 0)"
_ADD = """
    INSERT INTO idempotency_usage (scope, shard, bytes) VALUES ({scope}, {shard}, {delta})
    ON CONFLICT (scope, shard) DO UPDATE SET bytes = idempotency_usage.bytes + excluded.bytes;
"""
_FILL = """
    INSERT INTO idempotency_usage (scope, shard, bytes)
    SELECT r.scope, 0, sum({size}) FROM idempotency_records AS r
    GROUP BY r.scope HAVING sum({size}) <> 0
"""

_PG = (
    f"""
CREATE FUNCTION ustun_idempotency_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta bigint := 0;
    row_scope varchar;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        delta := delta - ({_PG_SIZE.format(row="OLD")});
        row_scope := OLD.scope;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        delta := delta + ({_PG_SIZE.format(row="NEW")});
        row_scope := NEW.scope;
    END IF;
    IF delta <> 0 THEN
        {_ADD.format(scope="row_scope", shard="pg_backend_pid() % 16", delta="delta")}
    END IF;
    RETURN NULL;
END $$
""",
    """
CREATE TRIGGER idempotency_usage AFTER INSERT OR UPDATE OR DELETE ON idempotency_records
    FOR EACH ROW EXECUTE FUNCTION ustun_idempotency_usage()
""",
)
_SQLITE_NEW = _SQLITE_SIZE.format(row="NEW")
_SQLITE_OLD = _SQLITE_SIZE.format(row="OLD")
_SQLITE = (
    f"""
CREATE TRIGGER idempotency_usage_insert AFTER INSERT ON idempotency_records
WHEN {_SQLITE_NEW} <> 0
BEGIN {_ADD.format(scope="NEW.scope", shard="0", delta=_SQLITE_NEW)} END
""",
    f"""
CREATE TRIGGER idempotency_usage_update AFTER UPDATE OF body, headers ON idempotency_records
WHEN {_SQLITE_NEW} <> {_SQLITE_OLD}
BEGIN {_ADD.format(scope="NEW.scope", shard="0", delta=f"{_SQLITE_NEW} - ({_SQLITE_OLD})")} END
""",
    f"""
CREATE TRIGGER idempotency_usage_delete AFTER DELETE ON idempotency_records
WHEN {_SQLITE_OLD} <> 0
BEGIN {_ADD.format(scope="OLD.scope", shard="0", delta=f"-({_SQLITE_OLD})")} END
""",
)


def upgrade() -> None:
    op.create_table(
        "idempotency_usage",
        sa.Column("scope", sa.String(64), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
    )
    pg = op.get_bind().dialect.name == "postgresql"
    # The triggers first: on PostgreSQL creating one locks the records against writes until
    # this migration commits, so the sum below misses none and counts none twice.
    for statement in _PG if pg else _SQLITE:
        op.execute(statement)
    op.execute(_FILL.format(size=(_PG_SIZE if pg else _SQLITE_SIZE).format(row="r")))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER idempotency_usage ON idempotency_records")
        op.execute("DROP FUNCTION ustun_idempotency_usage()")
    else:
        for change in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER idempotency_usage_{change}")
    op.drop_table("idempotency_usage")
