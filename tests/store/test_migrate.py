import pytest

from ustun.store import Database
from ustun.store.migrate import SchemaOutOfDate, check_current, current_revision, head_revision


async def test_migrated_database_is_at_head(db: Database) -> None:
    assert await current_revision(db) == head_revision()
    await check_current(db)


async def test_fresh_database_is_refused_until_upgraded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ustun.store.migrate import upgrade

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
