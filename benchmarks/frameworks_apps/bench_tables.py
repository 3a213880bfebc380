"""The tables every variant of benchmarks/frameworks.py writes, Flask's and Litestar's alike:
the payment, and (variant (a)) the app's own outbox row of its event."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, Column, DateTime, Integer, MetaData, String, Table

ACCOUNT = "bench"  # the account of the events (b) and (c) emit
TTL = 24 * 3600.0  # how long (b) keeps a key's record, as ustun does by default
metadata = MetaData()


def _now() -> datetime:
    return datetime.now(UTC)


payments = Table(
    "bench_payment",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("amount", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, default=_now),
)
events = Table(
    "bench_event",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("type", String(100), nullable=False),
    Column("data", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, default=_now),
)
