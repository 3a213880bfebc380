"""Prometheus metrics of one app: its own registry, fed by middleware, hooks and scrape probes
(`/metrics` serves it: `ustun.service.operations.metrics`).

Counters and histograms come from the HTTP middleware and from the pillars' instrumentation
events (`ustun.instrumentation`); queue depth, the age of the oldest due item (the stall
alarm) and jobs by status are read from the database at scrape time, so every process
reports the same truth about shared queues. Requests refused for a database outage are counted
by kind, and a full disk shows as `ustun_storage_full` (and in `/healthz`, which reads it here).
A scrape while the database is down still answers, with `ustun_database_up` 0.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock
from ustun.instrumentation import Event
from ustun.store import Database
from ustun.store.reach import Outage, free_bytes, outage

# Latency buckets (seconds) for HTTP handling and outbound webhook attempts.
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DELIVERY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)
# How long the disk counts as full after it last refused a write (a small write may still fit).
STORAGE_FULL_FOR = 60.0


@dataclass(frozen=True, slots=True)
class StorageFull:
    """The database's disk refusing writes: since when, and when it last did."""

    since: datetime
    last_refused_at: datetime


@dataclass(frozen=True, slots=True)
class QueueStat:
    """One queue at scrape time: items due now and how long the oldest has waited."""

    queue: str
    depth: int
    oldest_due_age: float


QueueProbe = Callable[[AsyncConnection], Awaitable[list[QueueStat]]]
CountProbe = Callable[[AsyncConnection], Awaitable[Mapping[str, int]]]


class Metrics:
    """Every metric of one app, in a registry of its own (two apps never collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "ustun_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "ustun_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.idempotency = Counter(
            "ustun_idempotency_requests",
            "Requests with an Idempotency-Key by outcome: executed, replayed, in-progress, reused.",
            ["outcome"],
            registry=r,
        )
        self.delivery_attempts = Counter(
            "ustun_webhook_delivery_attempts",
            "Webhook delivery attempts by outcome.",
            ["outcome"],
            registry=r,
        )
        self.delivery_duration = Histogram(
            "ustun_webhook_delivery_duration_seconds",
            "Latency of webhook delivery attempts by outcome.",
            ["outcome"],
            buckets=DELIVERY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "ustun_queue_depth", "Items due now, per queue (read at scrape).", ["queue"], registry=r
        )
        self.queue_oldest_age = Gauge(
            "ustun_queue_oldest_due_age_seconds",
            "How long the oldest due item of each queue has waited; grows when workers stall.",
            ["queue"],
            registry=r,
        )
        self.jobs = Gauge("ustun_jobs", "Jobs by status (read at scrape).", ["status"], registry=r)
        self.database_refusals = Counter(
            "ustun_database_refusals",
            "Requests answered 503/507 for a database outage, by kind: unavailable, busy, full.",
            ["outage"],
            registry=r,
        )
        self.database_up = Gauge(
            "ustun_database_up",
            "1 when the database answered the scrape's reads, else 0.",
            registry=r,
        )
        self.storage_full_gauge = Gauge(
            "ustun_storage_full",
            f"1 while the database's disk has refused a write in the last {STORAGE_FULL_FOR:g} s.",
            registry=r,
        )
        self.storage_free = Gauge(
            "ustun_storage_free_bytes",
            "Free bytes on the filesystem of the SQLite database (read at scrape; SQLite only).",
            ["storage"],
            registry=r,
        )
        # Each (method, route, status)'s labelled counter and histogram, found once: `labels()`
        # looks them up under a lock on every call. No more entries than the registry's own.
        self._http: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self.queue_probes: list[QueueProbe] = []
        self.job_probes: list[CountProbe] = []
        self._full: StorageFull | None = None
        self._full_until = 0.0  # monotonic

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered HTTP request and its latency."""
        labelled = self._http.get((method, route, status))
        if labelled is None:
            labelled = self._http[method, route, status] = (
                self.http_requests.labels(method, route, str(status)),
                self.http_duration.labels(method, route),
            )
        labelled[0].inc()
        labelled[1].observe(seconds)

    def on_event(self, event: Event) -> None:
        """The instrumentation hook: turn a pillar's event into metrics."""
        if event.name == "idempotency":
            self.idempotency.labels(event.labels.get("outcome", "unknown")).inc()
        elif event.name == "delivery_attempt":
            outcome = event.labels.get("outcome", "unknown")
            self.delivery_attempts.labels(outcome).inc()
            if event.value is not None:
                self.delivery_duration.labels(outcome).observe(event.value)

    def refused(self, found: Outage) -> None:
        """Count a request refused for a database outage; a full disk shows for a while."""
        self.database_refusals.labels(found.kind).inc()
        if found.kind == "full":
            now = clock.now()
            still = self.storage_full()
            self._full = StorageFull(
                since=now if still is None else still.since, last_refused_at=now
            )
            self._full_until = time.monotonic() + STORAGE_FULL_FOR

    def storage_full(self) -> StorageFull | None:
        """The database's disk refusing writes, if it did in the last `STORAGE_FULL_FOR` s."""
        return self._full if time.monotonic() < self._full_until else None

    async def refresh(self, db: Database) -> None:
        """Read the database-backed gauges (queues, jobs) through the registered probes, and
        the storage gauges; a database outage sets `ustun_database_up` to 0 instead."""
        self.storage_full_gauge.set(self.storage_full() is not None)
        free = free_bytes(db)
        if free is not None:
            self.storage_free.labels("database").set(free)
        try:
            async with db.read(snapshot=True) as conn:
                for queue_probe in self.queue_probes:
                    for stat in await queue_probe(conn):
                        self.queue_depth.labels(stat.queue).set(stat.depth)
                        self.queue_oldest_age.labels(stat.queue).set(stat.oldest_due_age)
                for job_probe in self.job_probes:
                    for status, count in (await job_probe(conn)).items():
                        self.jobs.labels(status).set(count)
        except Exception as exc:
            if outage(exc) is None:
                raise
            self.database_up.set(0)
        else:
            self.database_up.set(1)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)
