"""A write written once, run on any connection: a plan yields the statements it needs.

A plan is a generator: it yields `rows(...)` or `count(...)` queries and receives each one's
result, so the logic between statements (claim, else read what is there) is written once too.
`run` drives it on the async engine's connection (a unit of work), `run_sync` on a synchronous
DB-API connection (`DbapiConnection`), in whatever transaction each has open.

```python
def touch(key: str) -> Plan[bool]:
    changed = yield count(_TOUCH, {"key": key})
    return changed == 1
```
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from sqlalchemy import Executable

from ustun.store.statements import Statement

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from ustun.store.dbapi import DbapiConnection

T = TypeVar("T")


class Query(NamedTuple):
    """One statement of a plan, with its parameters; `rows`: its rows, else rows changed.

    A `Statement` is compiled once per dialect; a Core statement built for one call (its
    values bound in it, as a compare-and-set's preconditions are) goes through SQLAlchemy's
    own statement cache on the async engine, and is compiled for the call on a DB-API one.
    """

    statement: Statement | Executable
    params: Mapping[str, Any]
    rows: bool


# What a plan yields, what it is sent back (a list of rows, or a count), what it returns.
Plan = Generator[Query, Any, T]


def rows(statement: Statement | Executable, params: Mapping[str, Any] | None = None) -> Query:
    """A query whose result rows the plan is sent back."""
    return Query(statement, params or {}, rows=True)


def count(statement: Statement | Executable, params: Mapping[str, Any] | None = None) -> Query:
    """A write whose count of changed rows the plan is sent back."""
    return Query(statement, params or {}, rows=False)


async def run(plan: Plan[T], conn: AsyncConnection, *, begin: bool = True) -> T:
    """Run `plan` on an async engine connection, in its transaction (begun if need be);
    `begin=False`: a plan of ONE statement, a unit of work's only write, commits by itself."""
    result: Any = None
    try:
        while True:
            query = plan.send(result)
            statement, params = query.statement, query.params
            if not isinstance(statement, Statement):
                found = await conn.execute(statement, dict(params))
                result = found.all() if query.rows else found.rowcount
            elif query.rows:
                result = await statement.rows(conn, params, begin=begin)
            else:
                result = await statement.count(conn, params, begin=begin)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def run_sync(plan: Plan[T], conn: DbapiConnection) -> T:
    """Run `plan` on a synchronous DB-API connection, in the transaction it has open."""
    result: Any = None
    try:
        while True:
            query = plan.send(result)
            statement = query.statement
            if not isinstance(statement, Statement):
                statement = Statement(statement)
            if query.rows:
                result = statement.rows_sync(conn, query.params)
            else:
                result = statement.count_sync(conn, query.params)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
