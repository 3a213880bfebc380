import asyncio
from pathlib import Path

import pytest

from support import BACKENDS, drop_pg_database, make_pg_database
from ustun.service.accounts import authenticate, create_key, list_keys, revoke_key
from ustun.service.dashboard.session import open_session, session_account
from ustun.store import Database
from ustun.store.migrate import (
    SchemaOutOfDate,
    check_current,
    current_revision,
    head_revision,
    upgrade,
)


async def test_migrated_database_is_at_head(db: Database) -> None:
    assert await current_revision(db) == head_revision()
    await check_current(db)


async def test_fresh_database_is_refused_until_upgraded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = Database(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        assert await current_revision(db) is None
        with pytest.raises(SchemaOutOfDate, match="run `ustun migrate`"):
            await check_current(db)
        await upgrade(db)
        await upgrade(db)  # idempotent
        await check_current(db)
    finally:
        await db.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0009_upgrades_a_database_that_has_keys(backend: str, tmp_path: Path) -> None:
    name, url = (None, f"sqlite:///{tmp_path / 'old.db'}")
    if backend == "postgresql":
        name, url = await asyncio.to_thread(make_pg_database)
    db = Database(url)
    try:
        await upgrade(db, "0008")
        key = await create_key(db, "before-0009")
        await upgrade(db)
        await check_current(db)

        credential = await authenticate(db, key)
        assert credential is not None
        assert credential.account.name == "before-0009"
        (listed,) = await list_keys(db, "before-0009")
        assert listed.last_used_at is not None
        assert listed.revoked_at is None
        session_id = await open_session(db, credential)
        assert await session_account(db, session_id) == credential.account
        await revoke_key(db, credential.key_id)
        assert await authenticate(db, key) is None
        assert await session_account(db, session_id) is None
    finally:
        await db.dispose()
        if name is not None:
            await asyncio.to_thread(drop_pg_database, name)
