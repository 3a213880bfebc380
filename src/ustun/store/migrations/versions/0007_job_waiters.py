"""Jobs: NOTIFY only while a worker waits for one (PostgreSQL).

A NOTIFY per enqueue cost more server CPU than the INSERT itself and serialises the
notifying commits (PostgreSQL holds one lock from the NOTIFY's queueing to the end of the
commit). A worker whose last claim found jobs claims again on a timer and needs none; one whose
claim came back empty registers its listening connection in `job_waiters`, claims once more,
and sleeps. The jobs trigger notifies only if a waiter is registered.

No wake-up is lost: each enqueueing transaction holds a shared advisory lock from its INSERT to
its end, and the registration takes that lock exclusively, so it commits only after every
enqueue whose trigger could have missed it has committed too, and the claim that follows the
registration sees their jobs.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The advisory lock between enqueues (shared) and a waiter's registration (exclusive):
# b"ustunjob" as a big-endian bigint. `ustun.jobs.wakeup` registers with the same key.
GATE = 8463236172471758690

_NOTIFY_WAITERS = f"""
CREATE OR REPLACE FUNCTION ustun_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({GATE});
    IF EXISTS (SELECT FROM job_waiters) THEN
        PERFORM pg_notify('ustun_jobs', '');
    END IF;
    RETURN NULL;
END $$
"""
_NOTIFY_ALWAYS = """
CREATE OR REPLACE FUNCTION ustun_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ustun_jobs', '');
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # One row per waiting worker: the backend pid of its LISTENing connection.
    op.create_table("job_waiters", sa.Column("pid", sa.Integer(), primary_key=True))
    op.execute(_NOTIFY_WAITERS)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_NOTIFY_ALWAYS)
    op.drop_table("job_waiters")
