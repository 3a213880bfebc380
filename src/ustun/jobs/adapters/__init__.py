"""The jobs store's adapters, one per database, and the choice of one for a `Database`."""

from __future__ import annotations

from ustun.jobs.adapters.postgres import PostgresJobStore
from ustun.jobs.adapters.sqlite import SqliteJobStore
from ustun.jobs.store import JobStore
from ustun.store import Database

# The adapters hold no state: one of each serves every database of its kind.
_STORES: dict[str, JobStore] = {"sqlite": SqliteJobStore(), "postgresql": PostgresJobStore()}


def store_for(db: Database) -> JobStore:
    """The jobs store of `db`'s kind of database."""
    return _STORES[db.dialect]


__all__ = ["PostgresJobStore", "SqliteJobStore", "store_for"]
