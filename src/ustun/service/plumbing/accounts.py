"""Accounts and API keys: keys are shown once, stored only as their SHA-256, and revocable."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import clock, ids
from ustun.portal import PortalSession
from ustun.store import Database
from ustun.store.accounts import account_id as named_account
from ustun.store.plans import run
from ustun.store.tables import accounts, api_keys, dashboard_sessions

KEY_PREFIX = "ustun_sk_"
# What is kept and shown of a key besides its hash: `ustun_sk_` and 4 more characters.
PREFIX_LENGTH = len(KEY_PREFIX) + 4
DEFAULT_ACCOUNT = "default"
# `last_used_at` is written at most this often per key: a busy key costs no write per request.
LAST_USED_GRANULARITY = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Account:
    """The tenant a request acts for."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Credential:
    """An accepted API key or portal token: the account it acts for and the key's own id
    (a portal token's: its session's). `portal`: the session of a portal token (None for an
    API key)."""

    account: Account
    key_id: str
    portal: PortalSession | None = None


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What may be shown of an API key: its id and prefix, never the key."""

    id: str
    prefix: str
    account: Account
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def hash_key(key: str) -> str:
    """The stored form of an API key (and of a dashboard session id): its SHA-256.

    Both are 256 random bits, so a fast hash cannot be brute-forced.
    """
    return hashlib.sha256(key.encode()).hexdigest()


async def issue_key(
    conn: AsyncConnection, account_id: str, *, operator: bool = False
) -> tuple[str, str]:
    """Store a new key of `account_id` (an operator's, if `operator`); return its id and the
    key in clear (shown only once)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = ids.new_id("key")
    await conn.execute(
        insert(api_keys).values(
            id=key_id,
            account_id=account_id,
            key_hash=hash_key(key),
            prefix=key[:PREFIX_LENGTH],
            created_at=clock.now(),
            # Only when set: the column's default is false (and a key made on a database not
            # yet at migration 0020 names no column it lacks).
            **({"operator": True} if operator else {}),
        )
    )
    return key_id, key


async def create_key(
    db: Database, account_name: str = DEFAULT_ACCOUNT, *, operator: bool = False
) -> str:
    """Make a new API key for `account_name` (creating the account if new; an operator key if
    `operator`); return it in clear."""
    async with db.unit_of_work() as uow:
        account_id = await run(named_account(account_name), uow.conn)
        _, key = await issue_key(uow.conn, account_id, operator=operator)
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


async def authenticate(db: Database, key: str) -> Credential | None:
    """The credential of a valid, unrevoked key, or None; notes its use (once a minute at most)."""
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(
                    api_keys.c.id,
                    api_keys.c.last_used_at,
                    accounts.c.id.label("account_id"),
                    accounts.c.name,
                )
                .join(accounts, api_keys.c.account_id == accounts.c.id)
                .where(api_keys.c.key_hash == hash_key(key), api_keys.c.revoked_at.is_(None))
            )
        ).first()
    if row is None:
        return None
    now = clock.now()
    stale = now - LAST_USED_GRANULARITY
    if row.last_used_at is None or row.last_used_at < stale:
        # Conditional, so that many processes seeing the same stale value write it once.
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                update(api_keys)
                .where(
                    api_keys.c.id == row.id,
                    or_(api_keys.c.last_used_at.is_(None), api_keys.c.last_used_at < stale),
                )
                .values(last_used_at=now)
            )
    return Credential(Account(id=row.account_id, name=row.name), row.id)


async def is_operator(db: Database, key_id: str) -> bool:
    """Whether the key `key_id` is an operator's (read when needed, not on every request)."""
    async with db.read() as conn:
        found = await conn.scalar(select(api_keys.c.operator).where(api_keys.c.id == key_id))
    return bool(found)


async def account_for_key(db: Database, key: str) -> Account | None:
    """The account a valid, unrevoked API key belongs to, or None."""
    credential = await authenticate(db, key)
    return credential.account if credential else None


def _info(row: Row[Any, Any, Any, Any, Any, Any, Any]) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        prefix=row.prefix,
        account=Account(id=row.account_id, name=row.name),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


_KEY_INFO = select(
    api_keys.c.id,
    api_keys.c.prefix,
    api_keys.c.created_at,
    api_keys.c.last_used_at,
    api_keys.c.revoked_at,
    accounts.c.id.label("account_id"),
    accounts.c.name,
).join(accounts, api_keys.c.account_id == accounts.c.id)


async def list_keys(db: Database, account_name: str | None = None) -> list[KeyInfo]:
    """Every key (of one account, by name, if given), newest first; revoked ones included."""
    query = _KEY_INFO.order_by(api_keys.c.id.desc())
    if account_name is not None:
        query = query.where(accounts.c.name == account_name)
    async with db.read() as conn:
        return [_info(row) for row in await conn.execute(query)]


async def find_keys(db: Database, id_or_prefix: str) -> list[KeyInfo]:
    """The keys whose id or shown prefix is `id_or_prefix` (a prefix may match several)."""
    query = _KEY_INFO.where(
        or_(api_keys.c.id == id_or_prefix, api_keys.c.prefix == id_or_prefix)
    ).order_by(api_keys.c.id.desc())
    async with db.read() as conn:
        return [_info(row) for row in await conn.execute(query)]


async def revoke_key(db: Database, key_id: str, account_id: str | None = None) -> KeyInfo | None:
    """Revoke a key (of `account_id`, if given) and end its dashboard sessions; None if unknown.

    Revoking twice keeps the first time. Other processes may accept the key for as long as
    they cache it (`ustun.service.plumbing.admission.KEY_CACHE_SECONDS`).
    """
    query = _KEY_INFO.where(api_keys.c.id == key_id)
    if account_id is not None:
        query = query.where(api_keys.c.account_id == account_id)
    async with db.unit_of_work() as uow:
        row = (await uow.conn.execute(query)).first()
        if row is None:
            return None
        if row.revoked_at is None:
            await uow.conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=clock.now())
            )
            await uow.conn.execute(
                delete(dashboard_sessions).where(dashboard_sessions.c.api_key_id == key_id)
            )
            row = (await uow.conn.execute(query)).one()
    return _info(row)
