"""A synchronous DB-API connection that runs ustun's statements in the transaction it has open.

`sqlite3`, psycopg 3, Django's `connection` or a SQLAlchemy sync `Connection`'s driver
connection: each `Statement` is compiled for its dialect and parameter style, so the SQL a
pillar defines once runs here as it runs on the async engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any, Literal

from sqlalchemy.engine import Connection, Dialect

DialectName = Literal["sqlite", "postgresql"]
# `qmark` is sqlite3's own; `format` (`%s`) is psycopg's and Django's cursors' on both databases.
Paramstyle = Literal["qmark", "format"]


@cache
def _dialect(name: DialectName, paramstyle: Paramstyle) -> Dialect:
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import pysqlite

        return pysqlite.dialect(paramstyle=paramstyle)
    from sqlalchemy.dialects.postgresql import psycopg

    return psycopg.dialect(paramstyle=paramstyle)  # type: ignore[no-untyped-call]


class DbapiConnection:
    """`connection` (a DB-API connection or a cursor factory such as Django's `connection`) on
    `dialect`; `paramstyle` is the one its cursors take (default: the driver's own)."""

    def __init__(
        self,
        connection: Any,
        dialect: DialectName,
        *,
        paramstyle: Paramstyle | None = None,
    ) -> None:
        self.connection = connection
        style = paramstyle or ("qmark" if dialect == "sqlite" else "format")
        self.dialect = _dialect(dialect, style)

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """A cursor of the connection, closed after the block (sqlite3's is no context manager)."""
        cursor = self.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()


# The SQLAlchemy drivers whose DB-API connections ustun's statements run on, and their dialects.
_DRIVERS: dict[tuple[str, str], DialectName] = {
    ("sqlite", "pysqlite"): "sqlite",
    ("postgresql", "psycopg"): "postgresql",
    ("postgresql", "psycopg2"): "postgresql",
}


def sqlalchemy_connection(conn: Connection) -> DbapiConnection:
    """The DB-API connection under a synchronous SQLAlchemy `Connection` (a session's
    `connection()`, an `engine.begin()`'s), in the transaction that has open."""
    name = _DRIVERS.get((conn.dialect.name, conn.dialect.driver))
    if name is None:
        raise ValueError(
            "ustun runs on SQLite (sqlite3) and PostgreSQL (psycopg); this connection is "
            f"{conn.dialect.name}+{conn.dialect.driver}"
        )
    style: Paramstyle = "qmark" if name == "sqlite" else "format"
    return DbapiConnection(conn.connection.driver_connection, name, paramstyle=style)


def begin_immediate(conn: DbapiConnection) -> None:
    """On SQLite, begin the connection's transaction IMMEDIATE (unless one is open already), so
    that concurrent writers queue for the database's write lock rather than fail on it when
    their reads turn into writes. PostgreSQL needs nothing of the kind."""
    driver = conn.connection
    if conn.dialect.name == "sqlite" and not driver.in_transaction:
        driver.execute("BEGIN IMMEDIATE")
