"""Storage: SQLAlchemy Core tables, the engine (SQLite | PostgreSQL), migrations, unit of work."""

from ustun.store.engine import Database, async_url
from ustun.store.tables import metadata
from ustun.store.uow import UnitOfWork

__all__ = ["Database", "UnitOfWork", "async_url", "metadata"]
