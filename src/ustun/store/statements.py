"""Hot statements compiled once and run on the driver connection under SQLAlchemy's.

SQLAlchemy's async statement path costs about 0.3 ms of CPU per statement (greenlet switch,
cache key, result setup) and, on SQLite, 3-4 hand-offs to aiosqlite's thread. A `Statement` is
compiled from its Core form once per dialect, with the column types' bind and result
processors, and runs as an asyncpg prepared statement (PostgreSQL) or in one aiosqlite hand-off
(SQLite; with the BEGIN when it starts the transaction), on the same connection and in the same
transaction as the unit of work.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from sqlalchemy import Executable
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import Compiled

from ustun.store.uow import asyncpg_connection, current_unit_of_work, sqlite_call

if TYPE_CHECKING:
    from ustun.store.dbapi import DbapiConnection
    from ustun.store.engine import Database
    from ustun.store.plans import Plan

T = TypeVar("T")


class FastRow(tuple[Any, ...]):
    """A result row: by position, by attribute, and through `_mapping` like SQLAlchemy's `Row`."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))


class _Compiled(NamedTuple):
    sql: str
    params: tuple[tuple[str, Any], ...]  # each parameter's name and the value bound in its place
    binds: tuple[tuple[int, Callable[[Any], Any]], ...]  # (position, processor) where one is
    results: tuple[tuple[int, Callable[[Any], Any]], ...]  # (column, processor) where one is
    row: type[FastRow]


class Statement:
    """A Core statement (or one per dialect) run through the driver with named parameters.

    Every parameter the statement needs comes from the mapping given to `rows`/`count`, or
    from the value the Core form bound (a literal in `.values(...)`).
    """

    def __init__(
        self, statement: Executable, *, per_dialect: Mapping[str, Executable] | None = None
    ) -> None:
        self._default = statement
        self._per_dialect = dict(per_dialect or {})
        self._compiled: dict[tuple[str, str, str], _Compiled] = {}

    def _for(self, dialect: Dialect) -> _Compiled:
        """The statement compiled for `dialect`: its driver's parameter style and processors."""
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        compiled = self._compiled.get(key)
        if compiled is None:
            statement = self._per_dialect.get(dialect.name, self._default)
            compiled = self._compiled[key] = _compile(statement, dialect)
        return compiled

    def _args(self, compiled: _Compiled, params: Mapping[str, Any]) -> list[Any]:
        get = params.get
        args = [get(name, default) for name, default in compiled.params]
        for at, process in compiled.binds:  # most columns have no processor: visit those that do
            if args[at] is not None:
                args[at] = process(args[at])
        return args

    async def rows(
        self, conn: AsyncConnection, params: Mapping[str, Any], *, begin: bool = True
    ) -> list[FastRow]:
        """The statement's result rows, its types' result processing applied.

        `begin=False` is for a read: it joins the transaction the connection has open, if any,
        and otherwise runs as a statement of its own (one round trip, its own snapshot).
        """
        compiled = self._for(conn.dialect)
        args = self._args(compiled, params)
        if conn.dialect.name == "sqlite":
            raw: Sequence[Sequence[Any]] = await sqlite_call(
                conn, _fetchall, compiled.sql, args, begin=begin
            )
        else:
            driver = await asyncpg_connection(conn, begin=begin or conn.in_transaction())
            raw = await driver.fetch(compiled.sql, *args)
        return _processed(compiled, raw)

    async def read(self, db: Database, params: Mapping[str, Any]) -> list[FastRow]:
        """`rows` of a read through `db.read()`; outside a unit of work, on a driver connection
        of `db.driver_reader()`, which skips SQLAlchemy's connection checkout (one statement,
        its own snapshot, as `db.read()` gives too)."""
        if current_unit_of_work() is None:
            async with db.driver_reader() as driver:
                if driver is not None:
                    compiled = self._for(db.engine.dialect)
                    args = self._args(compiled, params)
                    if db.is_sqlite:
                        raw: Sequence[Sequence[Any]] = await driver.execute_fetchall(
                            compiled.sql, args
                        )
                    else:
                        raw = await driver.fetch(compiled.sql, *args)
                    return _processed(compiled, raw)
        async with db.read() as conn:
            return await self.rows(conn, params, begin=False)

    async def alone(self, db: Database, params: Mapping[str, Any]) -> list[FastRow]:
        """`rows` of a write that commits by itself: in the unit of work open in this context,
        if any; else on PostgreSQL ONE autocommit statement on `db.autocommit()` (no BEGIN or
        COMMIT round trip, no SQLAlchemy checkout), on SQLite a unit of work of its own whose
        BEGIN IMMEDIATE, statement and COMMIT go to aiosqlite's thread in ONE hand-off (its
        only before-commit hook runs the statement with `UnitOfWork.run_last`)."""
        if db.in_unit_of_work():
            async with db.unit_of_work() as uow:
                return await self.rows(uow.conn, params)
        if db.is_sqlite:
            from ustun.store.plans import rows

            def plan() -> Plan[list[FastRow]]:
                found: list[FastRow] = yield rows(self, params)
                return found

            done: list[list[FastRow]] = []
            async with db.unit_of_work() as uow:

                async def last() -> None:
                    done.append(await uow.run_last(plan(), commit_if=_always))

                uow.before_commit(last)
            return done[0]
        compiled = self._for(db.engine.dialect)
        async with db.autocommit() as driver:
            raw = await driver.fetch(compiled.sql, *self._args(compiled, params))
        return _processed(compiled, raw)

    async def count(
        self, conn: AsyncConnection, params: Mapping[str, Any], *, begin: bool = True
    ) -> int:
        """Run a write in the connection's transaction (begun if need be); rows it changed.

        `begin=False` (PostgreSQL) runs it as a statement of its own when the connection has no
        transaction open: a unit of work's last and only write (see `UnitOfWork.at_commit`).
        """
        compiled = self._for(conn.dialect)
        args = self._args(compiled, params)
        if conn.dialect.name == "sqlite":
            return await sqlite_call(conn, _rowcount, compiled.sql, args)
        driver = await asyncpg_connection(conn, begin=begin or conn.in_transaction())
        status: str = await driver.execute(compiled.sql, *args)
        return int(status.rpartition(" ")[2] or 0)

    def text(self, dialect: Dialect, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """The SQL and the positional arguments the statement runs with on `dialect` (for
        `EXPLAIN`)."""
        compiled = self._for(dialect)
        return compiled.sql, self._args(compiled, params)

    def rows_sync(self, conn: DbapiConnection, params: Mapping[str, Any]) -> list[FastRow]:
        """`rows` on a synchronous DB-API connection, in the transaction it has open."""
        compiled = self._for(conn.dialect)
        with conn.cursor() as cursor:
            cursor.execute(compiled.sql, self._args(compiled, params))
            raw = cursor.fetchall() if cursor.description else []
        return _processed(compiled, raw)

    def count_sync(self, conn: DbapiConnection, params: Mapping[str, Any]) -> int:
        """`count` on a synchronous DB-API connection, in the transaction it has open."""
        compiled = self._for(conn.dialect)
        with conn.cursor() as cursor:
            cursor.execute(compiled.sql, self._args(compiled, params))
            return int(cursor.rowcount)

    async def many(self, conn: AsyncConnection, params: Sequence[Mapping[str, Any]]) -> None:
        """Run a write once per parameter set, in one driver call."""
        compiled = self._for(conn.dialect)
        args = [self._args(compiled, each) for each in params]
        if conn.dialect.name == "sqlite":
            await sqlite_call(conn, _executemany, compiled.sql, args)
        else:
            await (await asyncpg_connection(conn)).executemany(compiled.sql, args)


def _always(_: object) -> bool:
    return True


# Run on aiosqlite's thread by `sqlite_call`, each with the `sqlite3.Connection` first.
def _fetchall(raw: sqlite3.Connection, sql: str, args: list[Any]) -> list[Any]:
    return raw.execute(sql, args).fetchall()


def _rowcount(raw: sqlite3.Connection, sql: str, args: list[Any]) -> int:
    # A finished DML statement is already reset: the cursor holds nothing open.
    return int(raw.execute(sql, args).rowcount)


def _executemany(raw: sqlite3.Connection, sql: str, args: list[list[Any]]) -> None:
    raw.executemany(sql, args)


def _processed(compiled: _Compiled, raw: Sequence[Sequence[Any]]) -> list[FastRow]:
    make, results = compiled.row, compiled.results
    if not results:
        return [make(row) for row in raw]
    rows = []
    for row in raw:
        values = list(row)
        for at, process in results:
            if values[at] is not None:
                values[at] = process(values[at])
        rows.append(make(values))
    return rows


def _compile(statement: Executable, dialect: Dialect) -> _Compiled:
    compiled: Compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    names = tuple(compiled.positiontup or ())  # type: ignore[attr-defined]
    binds = compiled.binds  # type: ignore[attr-defined]
    columns = list(getattr(statement, "exported_columns", ()))
    fields = tuple(c.key for c in columns)
    getters = {name: property(itemgetter(i)) for i, name in enumerate(fields)}
    row = type("FastRow", (FastRow,), {"__slots__": (), "_fields": fields, **getters})
    bind_processors = [binds[name].type._cached_bind_processor(dialect) for name in names]
    result_processors = [c.type._cached_result_processor(dialect, None) for c in columns]
    return _Compiled(
        sql=str(compiled),
        params=tuple((name, binds[name].value) for name in names),
        binds=tuple((at, p) for at, p in enumerate(bind_processors) if p is not None),
        results=tuple((at, p) for at, p in enumerate(result_processors) if p is not None),
        row=row,
    )
