"""A circuit breaker per webhook endpoint, its state in the endpoint's row for every worker.

- `webhook_endpoints.circuit_failures`: the endpoint's consecutive failed attempts (a success
  resets it); `circuit_open_until`: null while the circuit is closed; once open, when its probe
  may go (later than now: open, nothing of the endpoint is claimed; passed: half-open, one
  delivery at a time is). Both written by settling outcomes (`webhooks.circuit`).
- PostgreSQL: `ustun_claim_webhook_deliveries(...)` (same arguments and result as 0014's) skips
  the enabled endpoints whose circuit is open, and gives a half-open one a room of one less its
  leased deliveries, those whose request is over but not recorded yet included: the probe's
  outcome decides the circuit, so no second delivery goes before it is recorded. A disabled
  endpoint's deliveries are claimed to be given up, circuit or not, as before.

Plain `ADD COLUMN`s on both databases: no table is rebuilt.

Revision ID: 0019
Revises: 0018
"""

import importlib

import sqlalchemy as sa
from alembic import op

from ustun.store.types import UTCDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_0014 = importlib.import_module("ustun.store.migrations.versions.0014_fair_claims")

# 0014's claim (see its notes and 0013's) with the circuit: `ready` leaves out the enabled
# endpoints whose circuit is open, `room` gives a half-open one 1 less every leased delivery.
_CLAIM = """
CREATE FUNCTION ustun_claim_webhook_deliveries(
    p_now timestamptz, p_skip text[], p_horizon timestamptz, p_limit int,
    p_lease_until timestamptz, p_token text, p_finished text[], p_account_ids text[],
    p_account_room int[], p_account_limit int
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
    full_accounts text[] := ARRAY(
        SELECT a.account FROM unnest(p_account_ids, p_account_room) AS a(account, room)
        WHERE a.room <= 0);
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
        WHERE w.id <> ALL(p_skip) AND w.account_id <> ALL(full_accounts)
            AND (w.rate_limit IS NULL OR w.next_send_at IS NULL OR w.next_send_at <= p_horizon)
            AND (NOT w.enabled OR w.circuit_open_until IS NULL OR w.circuit_open_until <= p_now)
        FOR NO KEY UPDATE OF w SKIP LOCKED
    );
    IF cardinality(ready) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH room AS (
        SELECT w.id, w.account_id, w.rate_limit, w.ordering = 'fifo' AS fifo,
            greatest(w.next_send_at, p_now) AS start,
            least(
                CASE WHEN w.enabled AND w.circuit_open_until IS NOT NULL THEN 1 - (
                    SELECT count(*) FROM webhook_deliveries l WHERE l.endpoint_id = w.id
                        AND l.lease_token IS NOT NULL AND l.next_attempt_at > p_now)
                ELSE CASE WHEN w.ordering = 'fifo' THEN 1 ELSE w.max_in_flight END - (
                    SELECT count(*) FROM webhook_deliveries l WHERE l.endpoint_id = w.id
                        AND l.lease_token IS NOT NULL AND l.next_attempt_at > p_now
                        AND l.id <> ALL(p_finished))
                END,
                CASE WHEN w.rate_limit IS NULL THEN p_limit
                    ELSE 1 + floor(w.rate_limit
                        * extract(epoch FROM p_horizon - greatest(w.next_send_at, p_now)))::int
                END
            ) AS free
        FROM webhook_endpoints w WHERE w.id = ANY(ready)
    ), picked AS (
        SELECT d.id, r.id AS endpoint_id, r.account_id, d.next_attempt_at,
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
        SELECT h.id, r.id, r.account_id, h.next_attempt_at, r.start
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
    ), turns AS (
        SELECT p.*, row_number() OVER (
            PARTITION BY p.account_id ORDER BY p.next_attempt_at, p.id) AS turn
        FROM picked p
    ), chosen AS (
        SELECT t.* FROM turns t
        LEFT JOIN unnest(p_account_ids, p_account_room) AS a(account, room)
            ON a.account = t.account_id
        WHERE t.turn <= coalesce(a.room, p_account_limit)
        ORDER BY t.turn, t.next_attempt_at, t.id LIMIT p_limit
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


def upgrade() -> None:
    op.add_column(
        "webhook_endpoints",
        sa.Column("circuit_failures", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "webhook_endpoints", sa.Column("circuit_open_until", UTCDateTime(), nullable=True)
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(_0014._DROP_CLAIM)
        op.execute(_CLAIM)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_0014._DROP_CLAIM)
        op.execute(_0014._CLAIM)
    op.drop_column("webhook_endpoints", "circuit_open_until")
    op.drop_column("webhook_endpoints", "circuit_failures")
