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

# PostgreSQL: inserts and updates row by row (one record per statement on the request path),
# skipped by their WHEN when the size is unchanged; deletes once per statement, summed by scope.
# A row trigger would update a usage row once per deleted record, and PostgreSQL's updates of
# one row within one transaction slow down with each (its versions chain): a sweep of 20,000
# records took 11 s.
_GONE = """
CREATE FUNCTION ustun_idempotency_usage_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idempotency_usage (scope, shard, bytes)
    SELECT g.scope, {shard}, -sum({size}) FROM gone AS g
    GROUP BY g.scope HAVING sum({size}) <> 0
    ON CONFLICT (scope, shard) DO UPDATE SET bytes = idempotency_usage.bytes + excluded.bytes;
    RETURN NULL;
END $$
"""
_PG_NEW = _PG_SIZE.format(row="NEW")
_PG_OLD = _PG_SIZE.format(row="OLD")
_PG_SHARD = "pg_backend_pid() % 16"
_PG = (
    f"""
CREATE FUNCTION ustun_idempotency_usage_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta bigint := {_PG_NEW};
BEGIN
    IF TG_OP = 'UPDATE' THEN
        delta := delta - ({_PG_OLD});
    END IF;
    {_ADD.format(scope="NEW.scope", shard=_PG_SHARD, delta="delta")}
    RETURN NULL;
END $$
""",
    f"""
CREATE TRIGGER idempotency_usage_insert AFTER INSERT ON idempotency_records
    FOR EACH ROW WHEN ({_PG_NEW} <> 0) EXECUTE FUNCTION ustun_idempotency_usage_row()
""",
    f"""
CREATE TRIGGER idempotency_usage_update AFTER UPDATE ON idempotency_records
    FOR EACH ROW WHEN ({_PG_NEW} <> {_PG_OLD}) EXECUTE FUNCTION ustun_idempotency_usage_row()
""",
    _GONE.format(size=_PG_SIZE.format(row="g"), shard=_PG_SHARD),
    """
CREATE TRIGGER idempotency_usage_delete AFTER DELETE ON idempotency_records
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ustun_idempotency_usage_gone()
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
    pg = op.get_bind().dialect.name == "postgresql"
    table = " ON idempotency_records" if pg else ""
    for change in ("insert", "update", "delete"):
        op.execute(f"DROP TRIGGER idempotency_usage_{change}{table}")
    if pg:
        op.execute("DROP FUNCTION ustun_idempotency_usage_row()")
        op.execute("DROP FUNCTION ustun_idempotency_usage_gone()")
    op.drop_table("idempotency_usage")
