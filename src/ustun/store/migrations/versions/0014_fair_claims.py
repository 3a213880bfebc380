"""Fair claims across accounts, and a floor under `rate_limit`.

- PostgreSQL: `ustun_claim_webhook_deliveries(...)` takes three more arguments, the slots left
  to the accounts with requests under way in the claiming worker (an account with none left is
  skipped), and how many deliveries any other account may get, and hands out the due rows in
  turns across accounts (each account's soonest first, then each one's second, ...) where it
  took the soonest rows of all: one account's backlog of old deliveries filled whole claims, and
  so a worker's every slot, while another account's fresh delivery waited behind it.
- `webhook_endpoints.rate_limit` below 0.01 sends/s, the least an endpoint may now be given, is
  raised to it: the slot spacing `1 / rate_limit` of a value like 1e-300 overflowed the claim
  (SQLite's `timedelta`, PostgreSQL's timestamps) and stopped every account's deliveries. (No
  check constraint: on SQLite adding one rebuilds the table, whose drop cascades to deliveries.)

Revision ID: 0014
Revises: 0013
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_0013 = importlib.import_module("ustun.store.migrations.versions.0013_claim_function")

MIN_RATE_LIMIT = 0.01

# The claim of 0013 (see its notes), with the fair turns: `turns` numbers each account's picked
# rows soonest first, `chosen` takes no more of each than its slots left (`p_account_limit` for
# an account not listed), by turn, then by time.
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

_DROP_CLAIM = (
    "DROP FUNCTION ustun_claim_webhook_deliveries("
    "timestamptz, text[], timestamptz, int, timestamptz, text, text[], text[], int[], int)"
)


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE webhook_endpoints SET rate_limit = :floor WHERE rate_limit < :floor"
        ).bindparams(floor=MIN_RATE_LIMIT)
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(_0013._DROP_CLAIM)
        op.execute(_CLAIM)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_DROP_CLAIM)
        op.execute(_0013._CLAIM)
