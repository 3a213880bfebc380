"""Accounts and API keys: keys are shown once and stored only as their SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError

from ustun import clock, ids
from ustun.store import Database
from ustun.store.tables import accounts, api_keys

KEY_PREFIX = "ustun_sk_"
DEFAULT_ACCOUNT = "default"


@dataclass(frozen=True, slots=True)
class Account:
    """The tenant a request acts for."""

    id: str
    name: str


def hash_key(key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


async def create_key(db: Database, account_name: str = DEFAULT_ACCOUNT) -> str:
    """Make a new API key for `account_name` (creating the account if new); return it in clear."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    now = clock.now()
    async with db.unit_of_work() as uow:
        account_id = await uow.conn.scalar(
            select(accounts.c.id).where(accounts.c.name == account_name)
        )
        if account_id is None:
            account_id = ids.new_id("acct")
            await uow.conn.execute(
                insert(accounts).values(id=account_id, name=account_name, created_at=now)
            )
        await uow.conn.execute(
            insert(api_keys).values(
                id=ids.new_id("key"),
                account_id=account_id,
                key_hash=hash_key(key),
                prefix=key[: len(KEY_PREFIX) + 4],
                created_at=now,
            )
        )
    return key


async def bootstrap(db: Database) -> str | None:
    """On an empty database, create account `default` and return its first key; else None."""
    async with db.read() as conn:
        if await conn.scalar(select(func.count()).select_from(accounts)):
            return None
    try:
        return await create_key(db, DEFAULT_ACCOUNT)
    except IntegrityError:
        # Another process bootstrapped the same database at the same moment.
        return None


async def account_for_key(db: Database, key: str) -> Account | None:
    """The account an API key belongs to, or None for an unknown key."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(accounts.c.id, accounts.c.name)
                .join(api_keys, api_keys.c.account_id == accounts.c.id)
                .where(api_keys.c.key_hash == hash_key(key))
            )
        ).first()
    return Account(id=row.id, name=row.name) if row else None


async def account_by_id(db: Database, account_id: str) -> Account | None:
    """The account with this id, or None (it may have been removed since a session began)."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(accounts.c.id, accounts.c.name).where(accounts.c.id == account_id)
            )
        ).first()
    return Account(id=row.id, name=row.name) if row else None
