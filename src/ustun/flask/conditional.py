"""`conditional`: a versioned row read or written under the request's preconditions, on the
session's connection (`ustun.concurrency`: the check and the write are one statement).

A versioned table has an integer `version` column (a model with `version = mapped_column(
Integer, default=1)`); its strong `ETag` is the version. On GET/HEAD, `conditional` reads the
row and answers 304 itself when `If-None-Match` holds its tag; on PUT/PATCH it applies `values`
only if `If-Match` holds the current tag (428 without one, 412 when stale) and bumps the
version; on DELETE it deletes the row under the same rule. 404 when no row is at `where`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask.globals import request
from flask.helpers import abort
from flask.wrappers import Response
from sqlalchemy import ColumnElement, Table, select

from ustun.concurrency import Version, conditional_read, require_if_match
from ustun.concurrency.cas import AnyRow, delete_plan, set_plan, validators
from ustun.errors import NotFoundError
from ustun.flask.extension import current
from ustun.http.preconditions import Preconditions
from ustun.store.plans import Plan, rows, run_sync

_READS = frozenset({"GET", "HEAD"})


def etag(row: AnyRow) -> str:
    """The strong `ETag` of a versioned row, quotes included: `"3"`."""
    return str(Version.of(row).etag)


def conditional(
    model: Any,
    *where: ColumnElement[bool],
    values: Mapping[str, Any] | None = None,
    guard: ColumnElement[bool] | None = None,
) -> AnyRow:
    """The row of `model` (an ORM model or a `Table`) at `where`, read or written as the
    request's method and preconditions say; the row as it is now (as it was, for DELETE)."""
    table: Table = getattr(model, "__table__", model)
    pre = Preconditions.from_headers(request.headers.items())
    conn = current().connection()
    method = request.method
    if method in _READS:
        found = run_sync(_read(table, where), conn)
        if found is None:
            raise NotFoundError("No such resource.")
        if conditional_read(method, pre, validators(found)):
            abort(Response(status=304, headers={"ETag": etag(found)}))
        return found
    require_if_match(pre)
    if method == "DELETE":
        return run_sync(delete_plan(table, where=where, pre=pre), conn)
    if values is None:
        raise TypeError(f"conditional() on {method} needs the values to write")
    plan = set_plan(table, where=where, pre=pre, values=values, method=method, guard=guard)
    return run_sync(plan, conn)


def _read(table: Table, where: tuple[ColumnElement[bool], ...]) -> Plan[AnyRow | None]:
    found = yield rows(select(table).where(*where))
    row: AnyRow | None = found[0] if found else None
    return row
