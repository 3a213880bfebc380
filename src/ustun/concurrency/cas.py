"""Compare-and-set in the database: the request's preconditions become the UPDATE's WHERE.

`UPDATE t SET …, version = version + 1 WHERE <key> AND version = :expected … RETURNING *` either
changes the row the client saw or changes nothing; there is no window between a check and a
write. Only when nothing changed is the row read again, to say why: 404, 412, or the
business guard refused it. A versioned table has an integer `version` column and, optionally,
`generation` (see `ustun.concurrency.versions`) and `updated_at` columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Row,
    Table,
    and_,
    delete,
    false,
    not_,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun.concurrency.conditions import failed
from ustun.concurrency.versions import Version
from ustun.errors import GuardRejected, NotFoundError
from ustun.http.etag import EntityTag, EntityTagMatch
from ustun.http.preconditions import (
    IF_MATCH,
    IF_NONE_MATCH,
    Preconditions,
    Proceed,
    Validators,
    evaluate,
)
from ustun.store import dialects
from ustun.store.plans import Plan, rows, run
from ustun.store.statements import FastRow

# A row as the async engine (SQLAlchemy's `Row`) or a DB-API connection (`FastRow`) gives it.
AnyRow = Row[Any] | FastRow
# HTTP-dates have one-second resolution (RFC 9110 §5.6.7).
_ONE_SECOND = timedelta(seconds=1)


def validators(row: AnyRow) -> Validators:
    """The ETag and Last-Modified of a versioned row."""
    return Validators(Version.of(row).etag, row._mapping.get("updated_at"))


def _any_version(table: Table, tags: Iterable[EntityTag]) -> ColumnElement[bool]:
    versions = {v for v in map(Version.from_opaque, (t.opaque for t in tags)) if v is not None}
    clauses = []
    for version in versions:
        if "generation" in table.c:
            clauses.append(
                and_(table.c.version == version.number, table.c.generation == version.generation)
            )
        elif not version.generation:
            clauses.append(table.c.version == version.number)
    return or_(false(), *clauses)


def condition(table: Table, pre: Preconditions) -> ColumnElement[bool]:
    """The preconditions of a write (RFC 9110 §13.1) as SQL over the row's current version."""
    parts: list[ColumnElement[bool]] = []
    if pre.if_match is not None:
        # §13.1.1: strong comparison, so weak tags can never match; "*": the row exists.
        strong = [tag for tag in pre.if_match.tags if not tag.weak]
        parts.append(true() if pre.if_match.any else _any_version(table, strong))
    elif pre.if_unmodified_since is not None and "updated_at" in table.c:
        parts.append(table.c.updated_at < pre.if_unmodified_since + _ONE_SECOND)
    if pre.if_none_match is not None:
        # §13.1.2: weak comparison; "*": the row must not exist, which no UPDATE satisfies.
        listed = pre.if_none_match.tags
        parts.append(false() if pre.if_none_match.any else not_(_any_version(table, listed)))
    return and_(true(), *parts)


def _explain_miss(
    table: Table,
    where: Sequence[ColumnElement[bool]],
    method: str,
    pre: Preconditions,
    guarded: bool,
) -> Plan[Exception]:
    """Why a conditional write changed nothing: read the row again and say."""
    found = yield rows(select(table).where(*where))
    if not found:
        return NotFoundError("No such resource for this account.")
    current = found[0]
    outcome = evaluate(method, pre, validators(current))
    if not isinstance(outcome, Proceed):
        return failed(pre, outcome.field)
    if guarded:
        return GuardRejected(current)
    # It satisfies the preconditions now but did not when the statement ran (a concurrent
    # create or re-create): the client's view was stale all the same.
    return failed(pre, IF_MATCH)


def set_plan(
    table: Table,
    *,
    where: Sequence[ColumnElement[bool]],
    pre: Preconditions,
    values: Mapping[str, Any],
    method: str = "PUT",
    guard: ColumnElement[bool] | None = None,
) -> Plan[AnyRow]:
    """`compare_and_set` as a plan, to run on any connection (`ustun.store.plans`)."""
    statement = (
        update(table)
        .where(*where, condition(table, pre), true() if guard is None else guard)
        .values(**values, version=table.c.version + 1)
        .returning(*table.c)
    )
    found = yield rows(statement)
    if not found:
        raise (yield from _explain_miss(table, where, method, pre, guard is not None))
    return found[0]  # type: ignore[no-any-return]


def delete_plan(
    table: Table, *, where: Sequence[ColumnElement[bool]], pre: Preconditions
) -> Plan[AnyRow]:
    """`compare_and_delete` as a plan, to run on any connection (`ustun.store.plans`)."""
    found = yield rows(delete(table).where(*where, condition(table, pre)).returning(*table.c))
    if not found:
        raise (yield from _explain_miss(table, where, "DELETE", pre, False))
    return found[0]  # type: ignore[no-any-return]


async def compare_and_set(
    conn: AsyncConnection,
    table: Table,
    *,
    where: Sequence[ColumnElement[bool]],
    pre: Preconditions,
    values: Mapping[str, Any],
    method: str = "PUT",
    guard: ColumnElement[bool] | None = None,
) -> Row[Any]:
    """Apply `values` and bump `version` iff the row at `where` satisfies `pre` (and `guard`).

    Returns the new row. Raises `NotFoundError` when nothing is at `where`,
    `PreconditionFailedError` when the version does not satisfy `pre`, and `GuardRejected`
    when only `guard` is false.
    """
    plan = set_plan(table, where=where, pre=pre, values=values, method=method, guard=guard)
    return cast("Row[Any]", await run(plan, conn))


async def compare_and_delete(
    conn: AsyncConnection,
    table: Table,
    *,
    where: Sequence[ColumnElement[bool]],
    pre: Preconditions,
) -> Row[Any]:
    """Delete the row at `where` iff it satisfies `pre`; return it as it was. Raises as above."""
    return cast("Row[Any]", await run(delete_plan(table, where=where, pre=pre), conn))


async def insert_if_absent(
    conn: AsyncConnection, table: Table, values: Mapping[str, Any]
) -> Row[Any]:
    """`If-None-Match: *` as one statement: insert unless the key exists, else 412."""
    statement = (
        dialects.insert(conn, table).values(**values).on_conflict_do_nothing().returning(*table.c)
    )
    row = (await conn.execute(statement)).first()
    if row is None:
        raise failed(Preconditions(if_none_match=EntityTagMatch(any=True)), IF_NONE_MATCH)
    return row
