"""Tables of the jobs pillar: the queue itself, its event log (for SSE) and stored results."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    ColumnElement,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    func,
    literal_column,
    text,
)
from sqlalchemy.sql.selectable import NamedFromClause

from ustun.store.tables import metadata
from ustun.store.types import UTCDateTime

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(40), ForeignKey("accounts.id"), nullable=True),
    Column("kind", String(100), nullable=False),
    Column("status", String(16), nullable=False),
    Column("payload", JSON(), nullable=False),
    Column("progress", Integer(), nullable=False),
    # Incremented by every claim: the fencing token that makes a stale worker's writes no-ops.
    Column("attempts", Integer(), nullable=False),
    Column("max_attempts", Integer(), nullable=False),
    Column("run_at", UTCDateTime(), nullable=False),
    Column("locked_by", String(40), nullable=True),
    Column("lease_until", UTCDateTime(), nullable=True),
    Column("cancel_requested", Boolean(), nullable=False),
    Column("error", JSON(), nullable=True),
    Column("has_result", Boolean(), nullable=False),
    # Bumped on every visible change: the strong ETag and the SSE event id.
    Column("version", Integer(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("started_at", UTCDateTime(), nullable=True),
    Column("completed_at", UTCDateTime(), nullable=True),
    # The W3C traceparent of the span that enqueued it (`ustun.tracing`), null with tracing off:
    # its runs join that trace (migration 0022).
    Column("traceparent", String(55), nullable=True),
    # Partial indexes (migration 0006): a new or claimed job adds no entry to them.
    Index(
        "ix_jobs_account_id_id",
        "account_id",
        "id",
        postgresql_where=text("account_id IS NOT NULL"),
        sqlite_where=text("account_id IS NOT NULL"),
    ),
    Index(
        "ix_jobs_processing_lease",
        "lease_until",
        postgresql_where=text("status = 'processing'"),
        sqlite_where=text("status = 'processing'"),
    ),
    Index(
        "ix_jobs_completed_at",
        "completed_at",
        postgresql_where=text("completed_at IS NOT NULL"),
        sqlite_where=text("completed_at IS NOT NULL"),
    ),
)


def queue_of(table: NamedFromClause = jobs) -> ColumnElement[str]:
    """The queue a job of `table` (`jobs` or an alias) waits in: its account's, '' for a job of
    no account. Spelled as `ix_jobs_pending_queue` indexes it (the '' inline, not a parameter)."""
    return func.coalesce(table.c.account_id, literal_column("''"))


# Pending jobs by queue, oldest first (migration 0015): a claim takes turns across the queues
# and reads only the head of each; the pending-jobs quota counts one queue.
Index(
    "ix_jobs_pending_queue",
    queue_of(),
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=text("status = 'pending'"),
    sqlite_where=text("status = 'pending'"),
)

job_events = Table(
    "job_events",
    metadata,
    Column("job_id", String(40), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer(), primary_key=True),
    Column("type", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("progress", Integer(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

job_results = Table(
    "job_results",
    metadata,
    Column("job_id", String(40), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("media_type", String(100), nullable=False),
    Column("filename", String(200), nullable=False),
    Column("content", LargeBinary(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)
