"""The webhook claim as one server-side function; attempts without a foreign key.

- PostgreSQL: `ustun_claim_webhook_deliveries(...)` runs the dispatcher's claim (lock the ready
  endpoints, then lease within their room) in one round trip, where the client sent five (begin,
  settings, two statements, commit). Each statement of a volatile PL/pgSQL function takes a
  fresh snapshot, so the second still sees every lease committed by the claim that held the
  endpoint locks before: the reason the claim is two statements.
- `webhook_attempts.delivery_id` loses its foreign key to `webhook_deliveries`: its check ran a
  locking lookup of the delivery for every attempt recorded (a sixth of the database's work per
  delivery). Settling inserts attempts only for deliveries that still exist, and deleting an
  endpoint deletes its deliveries' attempts, which the cascade did before.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# The claim, in two statements of the function's transaction (the caller's own, one statement
# long: `SELECT * FROM ustun_claim_webhook_deliveries(...)` in autocommit).
#
# 1. Lock the endpoints that have a due delivery (`FOR NO KEY UPDATE ... SKIP LOCKED`: claims of
#    one endpoint take turns across workers, while inserting its deliveries, whose foreign key
#    takes `FOR KEY SHARE`, does not wait): one probe of its index range per endpoint (a LATERAL
#    with LIMIT 1: an EXISTS may be turned into a join that reads every due row), whatever its
#    backlog. A rate-limited endpoint whose next slot is beyond the horizon is left alone.
# 2. Each locked endpoint's room (its cap, 1 if FIFO, less its leased rows, from
#    `ix_webhook_deliveries_leased`, less those whose request is over but not recorded yet; with
#    a rate limit, no more slots than fit before the horizon), then that many of its soonest due
#    rows from its own index range (a FIFO endpoint: its head, the oldest undelivered event in
#    `(txid, seq)` order below the xmin horizon, if due), the batch's soonest of those leased,
#    each with its send time, and the rate limited endpoints' next slot moved past the last one
#    taken; joined to the event and endpoint in the same statement.
#
# An endpoint's due rows are a range of `ix_webhook_deliveries_endpoint_id_next_attempt_at` in
# row comparisons, read in the order only that index serves: with `endpoint_id = ...` the
# planner, which guesses an endpoint's share of the table from the average, walked the global
# due index instead, reading every endpoint's due rows to find one's. A FIFO head is found
# through the endpoint's index and each undelivered row's event by primary key (`OFFSET 0` keeps
# the planner from hash-joining the whole event table). Rows are updated through
# `= ANY(ARRAY(...))`, by primary key (with `IN (...)` the planner hash-joined them against a
# sequential scan of the whole table), and only while still due (a late settle may have finished
# one since it was picked).
#
# Settings, for the function's statements:
# - a plan made for each execution (`plan_cache_mode`): a cached generic plan is costed with
#   the table's size when it was made, so a dispatcher that started on an empty table went on
#   scanning the whole table for every claim once a burst arrived (70 ms per claim of 128 out of
#   10,000 due rows);
# - no JIT: the FIFO branch's cost estimate (a whole endpoint's rows) crossed the JIT threshold,
#   and compiling took 30 ms of a claim that runs in one;
# - an asynchronous commit, to the end of the caller's transaction: a claim lost in a crash only
#   leaves its rows due again.
_CLAIM = """
CREATE FUNCTION ustun_claim_webhook_deliveries(
    p_now timestamptz, p_skip text[], p_horizon timestamptz, p_limit int,
    p_lease_until timestamptz, p_token text, p_finished text[]
) RETURNS TABLE (
    id varchar, endpoint_id varchar, event_id varchar, attempt_count int, status varchar,
    event_type varchar, event_data text, event_created_at timestamptz, object_url text,
    endpoint_version int, endpoint_failing bool, send_at timestamptz
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan SET jit = off
AS $claim$
#variable_conflict use_column
DECLARE
    ready text[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    ready := ARRAY(
        SELECT w.id FROM webhook_endpoints w
        CROSS JOIN LATERAL (
            SELECT FROM webhook_deliveries d
            WHERE d.next_attempt_at IS NOT NULL
                AND (d.endpoint_id, d.next_attempt_at) > (w.id, '-infinity'::timestamptz)
                AND (d.endpoint_id, d.next_attempt_at) <= (w.id, p_now)
            ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1
        ) due
        WHERE w.id <> ALL(p_skip)
            AND (w.rate_limit IS NULL OR w.next_send_at IS NULL OR w.next_send_at <= p_horizon)
        FOR NO KEY UPDATE OF w SKIP LOCKED
    );
    IF cardinality(ready) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH room AS (
        SELECT w.id, w.rate_limit, w.ordering = 'fifo' AS fifo,
            greatest(w.next_send_at, p_now) AS start,
            least(
                CASE WHEN w.ordering = 'fifo' THEN 1 ELSE w.max_in_flight END - (
                    SELECT count(*) FROM webhook_deliveries l WHERE l.endpoint_id = w.id
                        AND l.lease_token IS NOT NULL AND l.next_attempt_at > p_now
                        AND l.id <> ALL(p_finished)),
                CASE WHEN w.rate_limit IS NULL THEN p_limit
                    ELSE 1 + floor(w.rate_limit
                        * extract(epoch FROM p_horizon - greatest(w.next_send_at, p_now)))::int
                END
            ) AS free
        FROM webhook_endpoints w WHERE w.id = ANY(ready)
    ), picked AS (
        SELECT d.id, r.id AS endpoint_id, d.next_attempt_at,
            CASE WHEN r.rate_limit IS NULL THEN p_now ELSE r.start + make_interval(secs =>
                (row_number() OVER (PARTITION BY r.id ORDER BY d.next_attempt_at, d.id) - 1)
                / r.rate_limit)
            END AS send_at
        FROM room r CROSS JOIN LATERAL (
            SELECT q.id, q.next_attempt_at FROM webhook_deliveries q
            WHERE NOT r.fifo AND q.next_attempt_at IS NOT NULL
                AND (q.endpoint_id, q.next_attempt_at) > (r.id, '-infinity'::timestamptz)
                AND (q.endpoint_id, q.next_attempt_at) <= (r.id, p_now)
            ORDER BY q.endpoint_id, q.next_attempt_at LIMIT greatest(r.free, 0)
        ) d
        UNION ALL
        SELECT h.id, r.id, h.next_attempt_at, r.start
        FROM room r CROSS JOIN LATERAL (
            SELECT q.id, q.next_attempt_at
            FROM webhook_deliveries q, LATERAL (
                SELECT txid, seq FROM webhook_events e WHERE e.id = q.event_id OFFSET 0
            ) e
            WHERE r.fifo AND r.free > 0 AND q.endpoint_id = r.id AND q.next_attempt_at IS NOT NULL
                AND e.txid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
            ORDER BY e.txid, e.seq LIMIT 1
        ) h
        WHERE h.next_attempt_at <= p_now
    ), chosen AS (
        SELECT * FROM picked p ORDER BY p.next_attempt_at, p.id LIMIT p_limit
    ), claimed AS (
        UPDATE webhook_deliveries d
        SET next_attempt_at = p_lease_until + (c.send_at - p_now), lease_token = p_token
        FROM chosen c
        WHERE d.id = ANY(ARRAY(SELECT c2.id FROM chosen c2)) AND d.id = c.id
            AND d.next_attempt_at IS NOT NULL AND d.next_attempt_at <= p_now
        RETURNING d.id, d.endpoint_id, d.event_id, d.attempt_count, d.status, c.send_at
    ), paced AS (
        UPDATE webhook_endpoints w
        SET next_send_at = s.last + make_interval(secs => 1 / w.rate_limit)
        FROM (SELECT k.endpoint_id, max(k.send_at) AS last FROM claimed k GROUP BY k.endpoint_id) s
        WHERE w.id = s.endpoint_id AND w.rate_limit IS NOT NULL
    )
    SELECT c.id, c.endpoint_id, c.event_id, c.attempt_count, c.status, e.type, e.data,
        e.created_at, e.object_url, w.version, w.failing_since IS NOT NULL, c.send_at
    FROM claimed c
    JOIN webhook_events e ON e.id = c.event_id
    JOIN webhook_endpoints w ON w.id = c.endpoint_id;
END
$claim$
"""

_DROP_CLAIM = (
    "DROP FUNCTION ustun_claim_webhook_deliveries("
    "timestamptz, text[], timestamptz, int, timestamptz, text, text[])"
)

# The foreign key's name: PostgreSQL's default; SQLite's has none, so a naming convention gives
# it one to drop it by.
_PG_FK = "webhook_attempts_delivery_id_fkey"
_NAMES = {"fk": "fk_%(table_name)s_%(column_0_name)s"}
_SQLITE_FK = "fk_webhook_attempts_delivery_id"


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.drop_constraint(_PG_FK, "webhook_attempts", type_="foreignkey")
        op.execute(_CLAIM)
        return
    with op.batch_alter_table("webhook_attempts", naming_convention=_NAMES) as batch:
        batch.drop_constraint(_SQLITE_FK, type_="foreignkey")


def downgrade() -> None:
    op.execute(
        "DELETE FROM webhook_attempts WHERE delivery_id NOT IN (SELECT id FROM webhook_deliveries)"
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(_DROP_CLAIM)
        op.create_foreign_key(
            _PG_FK,
            "webhook_attempts",
            "webhook_deliveries",
            ["delivery_id"],
            ["id"],
            ondelete="CASCADE",
        )
        return
    with op.batch_alter_table("webhook_attempts", naming_convention=_NAMES) as batch:
        batch.create_foreign_key(
            _SQLITE_FK, "webhook_deliveries", ["delivery_id"], ["id"], ondelete="CASCADE"
        )
