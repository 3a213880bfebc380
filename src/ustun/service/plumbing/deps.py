"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from ustun.jobs import Registry
from ustun.service.plumbing.accounts import Account
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.secretbox import SecretBox

MAX_PAGE = 100


def account_of(request: Request) -> Account:
    """The account the plumbing authenticated for this request; hot routes call it directly,
    since each FastAPI dependency costs a solve per request."""
    account: Account = request.state.account
    return account


def database_of(request: Request) -> Database:
    """The process's `Database`; hot routes call it directly (see `account_of`)."""
    db: Database = request.app.state.db
    return db


async def current_account(request: Request) -> Account:
    """The account the plumbing authenticated for this request, as a dependency."""
    return account_of(request)


async def database(request: Request) -> Database:
    """The process's `Database`, as a dependency."""
    return database_of(request)


async def secret_box(request: Request) -> SecretBox:
    """The box that seals and opens webhook secrets, as a dependency."""
    box: SecretBox = request.app.state.secret_box
    return box


async def settings(request: Request) -> Settings:
    """The app's settings, as a dependency."""
    found: Settings = request.app.state.settings
    return found


async def job_kinds(request: Request) -> Registry:
    """The app's job kinds (`enqueue` reads a kind's retry policy there), as a dependency."""
    kinds: Registry = request.app.state.job_kinds
    return kinds


CurrentAccount = Annotated[Account, Depends(current_account)]
DB = Annotated[Database, Depends(database)]
JobKinds = Annotated[Registry, Depends(job_kinds)]
Box = Annotated[SecretBox, Depends(secret_box)]
AppSettings = Annotated[Settings, Depends(settings)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size (1 to 100).")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=64, pattern=r"^[A-Za-z0-9_]+$", description="`next_cursor` of the previous page."
    ),
]
