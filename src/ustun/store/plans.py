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

from ustun.store.statements import Statement

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from ustun.store.dbapi import DbapiConnection

T = TypeVar("T")


class Query(NamedTuple):
    """One statement of a plan, with its parameters; `rows`: its rows, else rows changed."""

    statement: Statement
    params: Mapping[str, Any]
    rows: bool


# What a plan yields, what it is sent back (a list of rows, or a count), what it returns.
Plan = Generator[Query, Any, T]


def rows(statement: Statement, params: Mapping[str, Any]) -> Query:
    """A query whose result rows the plan is sent back."""
    return Query(statement, params, rows=True)


def count(statement: Statement, params: Mapping[str, Any]) -> Query:
    """A write whose count of changed rows the plan is sent back."""
    return Query(statement, params, rows=False)


async def run(plan: Plan[T], conn: AsyncConnection) -> T:
    """Run `plan` on an async engine connection, in its transaction (begun if need be)."""
    result: Any = None
    try:
        while True:
            query = plan.send(result)
            if query.rows:
                result = await query.statement.rows(conn, query.params)
            else:
                result = await query.statement.count(conn, query.params)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def run_sync(plan: Plan[T], conn: DbapiConnection) -> T:
    """Run `plan` on a synchronous DB-API connection, in the transaction it has open."""
    result: Any = None
    try:
        while True:
            query = plan.send(result)
            if query.rows:
                result = query.statement.rows_sync(conn, query.params)
            else:
                result = query.statement.count_sync(conn, query.params)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
