"""Django's own connection, as the connection ustun's statements run on."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connections

from ustun.django.conf import alias, vendor
from ustun.store.dbapi import DbapiConnection


class _SqliteCursors:
    """Django's SQLite connection, its rows as SQLite stores them: Django's connection parses
    columns declared DATETIME into datetimes, which ustun's column types parse themselves."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def cursor(self) -> _Stored:
        return _Stored(self.connection.cursor())


class _Stored:
    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [
            tuple(v.isoformat(" ") if isinstance(v, datetime) else v for v in row)
            for row in self._cursor.fetchall()
        ]


def host_connection(using: str | None = None) -> DbapiConnection:
    """Django's connection to ustun's database, in whatever transaction it has open. Its
    cursors take `%s` parameters on both databases."""
    name = using or alias()
    connection = connections[name]
    if vendor(name) == "sqlite":
        return DbapiConnection(_SqliteCursors(connection), "sqlite", paramstyle="format")
    return DbapiConnection(connection, "postgresql", paramstyle="format")
