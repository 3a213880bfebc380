"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from ustun.service.accounts import Account
from ustun.store import Database

MAX_PAGE = 100
DEFAULT_PAGE = 20


async def current_account(request: Request) -> Account:
    """The account `AuthMiddleware` authenticated for this request."""
    account: Account = request.state.account
    return account


async def database(request: Request) -> Database:
    """The process's `Database`."""
    db: Database = request.app.state.db
    return db


CurrentAccount = Annotated[Account, Depends(current_account)]
DB = Annotated[Database, Depends(database)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size (1 to 100).")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=64, pattern=r"^[A-Za-z0-9_]+$", description="`next_cursor` of the previous page."
    ),
]
