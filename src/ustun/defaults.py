"""Every default value in one place (plain constants: importable from any layer, no pydantic).

`ustun.settings` takes its defaults from here, and so do the pillars' own parameters, so that a
library user and the service start from the same values. Durations are in seconds.
"""

from __future__ import annotations

DEFAULT_DATABASE_URL = "sqlite:///./ustun.db"
# PostgreSQL: the longest a statement may run, and the longest it may wait for a lock (a row
# another transaction is changing), before the database cancels it (answered 503, retry-safe).
DEFAULT_STATEMENT_TIMEOUT = 30
DEFAULT_LOCK_TIMEOUT = 5
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_LOG_LEVEL = "info"
# Write transactions one process runs at once (see `ustun.store.Database`).
DEFAULT_POOL_SIZE = 10
# Items of a list the API returns when the request names no `limit`.
DEFAULT_PAGE_SIZE = 20

# How long an idempotency record is kept, and how long a claim holds its key before a retry
# may take it over (the request that held it crashed).
DEFAULT_IDEMPOTENCY_TTL = 86_400
DEFAULT_IDEMPOTENCY_LEASE = 30
# Bytes of stored idempotent answers (headers and body) one account may keep, 100 MiB; past it a
# new keyed request is 429 `quota-exceeded` until enough of them expire.
DEFAULT_IDEMPOTENCY_MAX_BYTES = 104_857_600
# The largest request body the idempotency middleware reads to fingerprint and keep (1 MiB).
DEFAULT_IDEMPOTENCY_MAX_BODY = 1_048_576
# How often the sweeper deletes expired idempotency records.
DEFAULT_IDEMPOTENCY_SWEEP_INTERVAL = 60.0
# Where the Redis record store keeps its keys.
DEFAULT_REDIS_PREFIX = "ustun:idem:"

# Delays before each webhook retry (±20 % jitter): about 3 days in all, then `dead`.
DEFAULT_WEBHOOK_RETRY_SCHEDULE = (5, 300, 1_800, 7_200, 18_000, 36_000, 50_400, 72_000, 86_400)
DEFAULT_WEBHOOK_TIMEOUT = 15
# An endpoint's circuit opens after this many consecutive failed attempts (0: no breaker), and
# stays open this many seconds before one delivery probes it (`ustun.webhooks.circuit`).
DEFAULT_WEBHOOK_CIRCUIT_FAILURES = 5
DEFAULT_WEBHOOK_CIRCUIT_COOLDOWN = 30
# A worker holds claimed webhook deliveries this long before another worker may take them over.
DEFAULT_WEBHOOK_LEASE = 60
# Clock skew a webhook receiver accepts in `webhook-timestamp` (Standard Webhooks: 5 minutes).
DEFAULT_SIGNATURE_TOLERANCE = 300
# Deliveries one endpoint may have in flight at once, across all workers (a FIFO endpoint: 1).
DEFAULT_ENDPOINT_MAX_IN_FLIGHT = 8
# Attempts one dispatcher has in flight at once, all endpoints together.
DEFAULT_DISPATCHER_MAX_IN_FLIGHT = 512
# How often an idle dispatcher looks for due deliveries (a doorbell or NOTIFY wakes it sooner).
DEFAULT_WEBHOOK_POLL_INTERVAL = 1.0
# Deliveries one claim takes: half the largest window an endpoint may have (`max_in_flight`
# 256), so the next claim is under way while the first half is on the wire, where a claim of
# the whole window waited for all of it to be answered (NATS relay 0.47x the bare publish loop
# at 256, 0.52x at 128).
DEFAULT_WEBHOOK_CLAIM_BATCH = 128

# The receiving side: how long a received event is held by the handler running it, how often
# a failing handler runs, with backoff from this many seconds, how many messages a broker
# consumer takes ahead, and how often and by how many events the reconciler reads the feed.
DEFAULT_INBOX_LEASE = 60.0
DEFAULT_HANDLER_ATTEMPTS = 5
DEFAULT_HANDLER_BACKOFF = 0.5
DEFAULT_CONSUMER_PREFETCH = 16
DEFAULT_RECONCILE_INTERVAL = 60.0
DEFAULT_RECONCILE_PAGE_SIZE = 100

DEFAULT_JOB_LEASE = 30
DEFAULT_JOB_POLL_INTERVAL = 1.0
DEFAULT_JOB_MAX_ATTEMPTS = 5
DEFAULT_JOB_RETRY_BASE = 2.0
DEFAULT_JOB_RETENTION = 7 * 86_400
# Jobs one runner runs at once, and the worker processes that run their offloaded steps.
DEFAULT_JOB_CONCURRENCY = 4
DEFAULT_JOB_PROCESSES = 1
# How often finished jobs past their retention are deleted.
DEFAULT_JOB_SWEEP_INTERVAL = 60.0
# Days an event's payload and its attempts' response bodies are kept, and how often (seconds)
# the sweeper expunges those past it (`ustun.webhooks.retention`).
DEFAULT_WEBHOOK_PAYLOAD_RETENTION = 30.0
DEFAULT_WEBHOOK_SWEEP_INTERVAL = 60.0
# How often an open job event stream reads the jobs' events.
DEFAULT_JOB_WATCH_INTERVAL = 0.25

# The client's retries (`ustun.http.backoff.Backoff`): safe without configuration
# (stamina-style), close to the Stripe SDK's. Attempts in all, the first one included; the
# ceiling of the first backoff in seconds, doubled on every retry up to the cap; the seconds
# after the first attempt when no new attempt may start; the longest `Retry-After` obeyed.
DEFAULT_BACKOFF_ATTEMPTS = 5
DEFAULT_BACKOFF_BASE = 0.5
DEFAULT_BACKOFF_CAP = 8.0
DEFAULT_BACKOFF_DEADLINE = 60.0
DEFAULT_RETRY_AFTER_CAP = 60.0

# The largest request body the service reads, in bytes (1 MiB); larger ones get 413.
DEFAULT_MAX_BODY = 1_048_576
# Per-account quotas: webhook endpoints an account may have, and test pings it may send a minute.
DEFAULT_MAX_ENDPOINTS = 100
DEFAULT_TEST_PINGS_PER_MINUTE = 10
# Pending jobs one account may have waiting; an enqueue past it is 429 `quota-exceeded`.
DEFAULT_MAX_PENDING_JOBS = 1_000
# Job event streams (`GET /v1/jobs/{id}/events`) one process keeps open for one account, and in
# all: each holds a socket, so the total stays well under the usual open-file limit of 1,024.
DEFAULT_MAX_STREAMS_PER_ACCOUNT = 20
DEFAULT_MAX_STREAMS = 500
# Failed dashboard logins and bearer checks one client address may make in one window.
DEFAULT_AUTH_FAILURE_LIMIT = 20
DEFAULT_AUTH_FAILURE_WINDOW = 60
# Requests one account may make a second in one `ustun serve` process (a token bucket), in
# bursts of at most this many; past it 429 `rate-limited`.
DEFAULT_RATE_LIMIT = 100
DEFAULT_RATE_BURST = 200
# Requests of one account one `ustun serve` process works on at once, whatever they cost; the
# account's further requests wait in its own queue, never ahead of another account's.
DEFAULT_MAX_REQUESTS_IN_FLIGHT = 2

# What `ustun serve` takes from one connection: a request line and headers of at most this
# many bytes (64 KiB) and header fields (past either: 431), the head within this many seconds
# of connecting (or of its first byte, on a kept-alive connection), and the body within this
# many seconds of the head; an idle kept-alive connection is closed after this many seconds.
DEFAULT_MAX_HEADER_BYTES = 65_536
DEFAULT_MAX_HEADERS = 100
DEFAULT_HEADER_TIMEOUT = 10
DEFAULT_BODY_TIMEOUT = 60
DEFAULT_KEEP_ALIVE_TIMEOUT = 5
