"""The webhooks store's adapters, one per dialect, and the one place that picks between them."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.store import Database
from ustun.store.dbapi import DbapiConnection
from ustun.webhooks.adapters.postgres import PostgresStore
from ustun.webhooks.adapters.sqlite import SqliteStore
from ustun.webhooks.store import WebhookStore

_STORES: dict[str, WebhookStore] = {"sqlite": SqliteStore(), "postgresql": PostgresStore()}


def for_database(db: Database) -> WebhookStore:
    """The store for `db`'s dialect."""
    return _STORES[db.dialect]


def for_connection(conn: AsyncConnection) -> WebhookStore:
    """The store for the dialect `conn` (a unit of work's, a read's) speaks."""
    return _STORES[conn.dialect.name]


def notifies(conn: DbapiConnection) -> bool:
    """Whether the plans run on a host framework's `conn` NOTIFY dispatchers (`notify=`):
    PostgreSQL's, delivered at commit."""
    return conn.dialect.name == "postgresql"
