"""Cursor pagination shared by every list: newest first, the cursor is the last id returned.

Ids are time-ordered (`ustun.ids`), so `id < cursor` with `ORDER BY id DESC` pages stably
even while new rows arrive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, Table, select
from sqlalchemy.ext.asyncio import AsyncConnection


async def page(
    conn: AsyncConnection,
    table: Table,
    *,
    where: Sequence[ColumnElement[bool]],
    limit: int,
    cursor: str | None,
    render: Callable[[Row[Any]], dict[str, Any]],
) -> dict[str, Any]:
    """One page of `table` rows matching `where`, as `{"data": [...], "next_cursor": …}`."""
    query = select(table).where(*where)
    if cursor is not None:
        query = query.where(table.c.id < cursor)
    rows = (await conn.execute(query.order_by(table.c.id.desc()).limit(limit + 1))).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return {"data": [render(r) for r in rows], "next_cursor": rows[-1].id if more else None}
