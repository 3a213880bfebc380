"""`/v1/api-keys`: an account lists, creates and revokes its own API keys (never another's)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy import Row, select

from ustun.clock import rfc3339, rfc3339_or_none
from ustun.defaults import DEFAULT_PAGE_SIZE
from ustun.errors import ProblemError
from ustun.idempotency import idempotency
from ustun.idempotency.sealing import CACHE_CONTROL, NO_STORE
from ustun.service.plumbing.accounts import issue_key, revoke_key
from ustun.service.plumbing.admission import KeyCache
from ustun.service.plumbing.deps import DB, CurrentAccount, Cursor, Limit
from ustun.service.plumbing.pagination import page
from ustun.store.tables import api_keys

router = APIRouter(prefix="/v1/api-keys", tags=["api keys"])
PATH = "/v1/api-keys"


def render(row: Row[Any]) -> dict[str, Any]:
    """The public shape of a key: its prefix, never the key or its hash."""
    return {
        "id": row.id,
        "object": "api_key",
        "prefix": row.prefix,
        "created_at": rfc3339(row.created_at),
        "last_used_at": rfc3339_or_none(row.last_used_at),
        "revoked_at": rfc3339_or_none(row.revoked_at),
    }


@router.get("")
async def list_keys(
    account: CurrentAccount, db: DB, limit: Limit = DEFAULT_PAGE_SIZE, cursor: Cursor = None
) -> dict[str, Any]:
    """The account's keys, newest first, revoked ones included (with `revoked_at`)."""
    async with db.read() as conn:
        return await page(
            conn,
            api_keys,
            where=[api_keys.c.account_id == account.id],
            limit=limit,
            cursor=cursor,
            render=render,
        )


@router.post("", status_code=201, openapi_extra=idempotency("optional"))
async def create_key(account: CurrentAccount, db: DB, response: Response) -> dict[str, Any]:
    """A new key for the account: `key` is in this response only.

    Sent `no-store`, so an idempotent retry's stored copy is kept sealed, never in clear.
    """
    async with db.unit_of_work() as uow:
        key_id, key = await issue_key(uow.conn, account.id)
        row = (await uow.conn.execute(select(api_keys).where(api_keys.c.id == key_id))).one()
    response.headers[CACHE_CONTROL] = NO_STORE
    return render(row) | {"key": key}


@router.delete("/{key_id}", status_code=204)
async def revoke(key_id: str, account: CurrentAccount, db: DB, request: Request) -> Response:
    """Revoke a key of the account at once (in this process) and end its dashboard sessions."""
    if await revoke_key(db, key_id, account.id) is None:
        raise ProblemError("not-found", f"No API key {key_id}.")
    cache: KeyCache = request.app.state.key_cache
    cache.forget(key_id)
    return Response(status_code=204)
