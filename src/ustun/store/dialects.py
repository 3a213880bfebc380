"""What differs between SQLite and PostgreSQL in a statement built by a pillar, in one place."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection


def insert(conn: AsyncConnection, table: Table) -> Any:
    """`INSERT` into `table` in the dialect of `conn`, with its `on_conflict_do_*` methods."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)
