"""Migration 0020 on both databases: keys made before it are not operators' and keep working,
portal sessions can be opened after it, and it goes down and up again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, inspect, select

from support import BACKENDS, drop_pg_database, make_pg_database
from ustun import portal
from ustun.service.plumbing.accounts import authenticate, create_key, is_operator
from ustun.store import Database
from ustun.store.migrate import _config, check_current, upgrade
from ustun.store.tables import api_keys
from ustun.webhooks.catalog import Catalog


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0020_adds_operator_keys_and_portal_sessions(backend: str, tmp_path: Path) -> None:
    name, url = (None, f"sqlite:///{tmp_path / 'old.db'}")
    if backend == "postgresql":
        name, url = await asyncio.to_thread(make_pg_database)
    db = Database(url)
    try:
        await upgrade(db, "0019")
        key = await create_key(db, "before-0020")
        await upgrade(db)
        await check_current(db)
        credential = await authenticate(db, key)
        assert credential is not None
        assert not await is_operator(db, credential.key_id)
        operator = await authenticate(db, await create_key(db, "ops", operator=True))
        assert operator is not None
        assert await is_operator(db, operator.key_id)

        made = await portal.link(db, "before-0020", base_url="https://x.example", catalog=Catalog())
        assert (await portal.find(db, made.token)) == made.session

        def down_and_up(conn: Connection) -> list[str]:
            command.downgrade(_config(conn), "0019")
            tables = inspect(conn).get_table_names()
            columns = [c["name"] for c in inspect(conn).get_columns("api_keys")]
            command.upgrade(_config(conn), "head")
            return [*tables, *columns]

        async with db.engine.begin() as conn:
            seen = await conn.run_sync(down_and_up)
        assert "portal_sessions" not in seen
        assert "operator" not in seen
        await check_current(db)
        async with db.read() as conn:
            flags = list(await conn.scalars(select(api_keys.c.operator)))
        assert flags == [False, False]  # the column came back with its default
    finally:
        await db.dispose()
        if name is not None:
            await asyncio.to_thread(drop_pg_database, name)
