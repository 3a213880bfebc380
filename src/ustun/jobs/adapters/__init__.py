"""The jobs store's adapters, one per database, and the choice of one for a `Database`."""

from __future__ import annotations

from ustun.jobs.adapters.postgres import PostgresJobStore
from ustun.jobs.adapters.sqlite import SqliteJobStore
from ustun.jobs.store import JobStore
from ustun.store import Database


def store_for(db: Database) -> JobStore:
    """The jobs store of `db` (a few attributes: cheap enough to make per call)."""
    return SqliteJobStore(db) if db.is_sqlite else PostgresJobStore(db)


__all__ = ["PostgresJobStore", "SqliteJobStore", "store_for"]
