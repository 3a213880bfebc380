"""What the test apps do when a gunicorn worker imports them: create their tables."""

from __future__ import annotations

from sqlalchemy import Engine, MetaData, text

from ustun.store.dbapi import begin_immediate, sqlalchemy_connection


def create_tables(engine: Engine, metadata: MetaData) -> None:
    """Create `metadata`'s tables unless they exist. gunicorn's workers import an app at the
    same moment, and two CREATE TABLEs of one name on PostgreSQL collide (a unique violation in
    pg_type or pg_class, or "already exists"), failing a worker's boot and so the server: each
    worker checks and creates under a lock held to its commit (PostgreSQL's advisory lock,
    SQLite's write lock)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('ustun test app tables'))"))
        else:
            begin_immediate(sqlalchemy_connection(conn))
        metadata.create_all(conn)
