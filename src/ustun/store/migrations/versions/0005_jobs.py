"""Jobs: the queue, its event log (SSE) and stored results (reports).

Triggers append a `job_events` row for every new version of a job (so no write path can
forget one, and it costs no extra round trip) and, on PostgreSQL, NOTIFY idle workers when jobs
are enqueued: delivered at commit, never for a rolled-back enqueue.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(40), sa.ForeignKey("accounts.id"), nullable=True),
        sa.Column("kind", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("progress", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("run_at", UTCDateTime(), nullable=False),
        sa.Column("locked_by", sa.String(40), nullable=True),
        sa.Column("lease_until", UTCDateTime(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("has_result", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("completed_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_jobs_account_id_id", "jobs", ["account_id", "id"])
    op.create_index(
        "ix_jobs_pending_run_at",
        "jobs",
        ["run_at", "id"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_jobs_processing_lease",
        "jobs",
        ["lease_until"],
        postgresql_where=sa.text("status = 'processing'"),
        sqlite_where=sa.text("status = 'processing'"),
    )
    op.create_index("ix_jobs_completed_at", "jobs", ["completed_at"])
    op.create_table(
        "job_events",
        sa.Column(
            "job_id",
            sa.String(40),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("progress", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "job_results",
        sa.Column(
            "job_id",
            sa.String(40),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column("filename", sa.String(200), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    _create_triggers()


# Every change of a job after its creation (a new version) appends its event; a version bump
# that only records a cancel request is not an event of its own. Version 1 (creation) needs no
# row: the job row itself says it (`ustun.jobs.queue.events_after`).
_EVENT_WHEN = (
    "NEW.version <> OLD.version AND NOT (NEW.cancel_requested AND NOT OLD.cancel_requested)"
)
_EVENT_VALUES = """
    INSERT INTO job_events (job_id, version, type, status, progress, created_at)
    VALUES (NEW.id, NEW.version,
            CASE WHEN NEW.status = OLD.status THEN 'progress' ELSE 'status' END,
            NEW.status, NEW.progress, NEW.updated_at);
"""
_PG_TRIGGERS = (
    f"""
CREATE FUNCTION ustun_job_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {_EVENT_VALUES}
    RETURN NULL;
END $$
""",
    f"""
CREATE TRIGGER jobs_event AFTER UPDATE ON jobs
    FOR EACH ROW WHEN ({_EVENT_WHEN}) EXECUTE FUNCTION ustun_job_event()
""",
    # One NOTIFY per enqueueing statement, delivered at commit (never for a rollback).
    """
CREATE FUNCTION ustun_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ustun_jobs', '');
    RETURN NULL;
END $$
""",
    """
CREATE TRIGGER jobs_notify AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION ustun_jobs_notify()
""",
)
_SQLITE_TRIGGERS = (
    f"""
CREATE TRIGGER jobs_event AFTER UPDATE OF version ON jobs WHEN {_EVENT_WHEN}
BEGIN
    {_EVENT_VALUES}
END
""",
)


def _create_triggers() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    for statement in _PG_TRIGGERS if pg else _SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER jobs_notify ON jobs")
        op.execute("DROP FUNCTION ustun_jobs_notify()")
        op.execute("DROP TRIGGER jobs_event ON jobs")
        op.execute("DROP FUNCTION ustun_job_event()")
    op.drop_table("job_results")
    op.drop_table("job_events")
    op.drop_table("jobs")
