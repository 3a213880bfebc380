import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, inspect, select, text
from starlette.types import Message, Receive, Scope, Send

from support import BACKENDS, drop_pg_database, make_pg_database
from ustun import clock, ids, jobs
from ustun.errors import SchemaOutOfDate, TablesMissing
from ustun.idempotency import IdempotencyMiddleware, SqlRecordStore
from ustun.jobs.adapters import store_for
from ustun.service.dashboard.session import open_session, session_account
from ustun.service.plumbing.accounts import (
    account_for_key,
    authenticate,
    create_key,
    list_keys,
    revoke_key,
)
from ustun.store import Database
from ustun.store.migrate import (
    _config,
    check_current,
    current_revision,
    head_revision,
    upgrade,
)
from ustun.webhooks import feed
from ustun.webhooks.receiving.inbox import DatabaseInbox
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import attempts, endpoints
from webhook_support import until


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


# Interleaved migrations deadlock rather than fail: the thread method ends the process.
@pytest.mark.timeout(60, method="thread")
async def test_databases_migrated_at_once_in_one_process_each_reach_head(tmp_path: Path) -> None:
    """Alembic's `context` and `op` are process-wide: two migrations interleaved in one event
    loop (say, two consumers' inboxes created on first use) must not run into each other."""
    dbs = [Database(f"sqlite:///{tmp_path / f'inbox{i}.db'}") for i in range(4)]
    try:
        await asyncio.gather(*(upgrade(db) for db in dbs))
        for db in dbs:
            assert await current_revision(db) == head_revision()
            async with db.read() as conn:
                assert await conn.scalar(select(endpoints.c.id).limit(1)) is None
    finally:
        for db in dbs:
            await db.dispose()


@contextlib.asynccontextmanager
async def _old_database(backend: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A database of `backend` for a test that migrates it from an older revision; dropped
    (PostgreSQL) or left in `tmp_path` (SQLite) afterwards."""
    name, url = (None, f"sqlite:///{tmp_path / 'old.db'}")
    if backend == "postgresql":
        name, url = await asyncio.to_thread(make_pg_database)
    db = Database(url)
    try:
        yield db
    finally:
        await db.dispose()
        if name is not None:
            await asyncio.to_thread(drop_pg_database, name)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0009_upgrades_a_database_that_has_keys(backend: str, tmp_path: Path) -> None:
    async with _old_database(backend, tmp_path) as db:
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


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0010_puts_existing_events_first_in_the_feed_and_keeps_endpoints_hmac(
    backend: str, tmp_path: Path
) -> None:
    async with _old_database(backend, tmp_path) as db:
        await upgrade(db, "0009")
        account = await account_for_key(db, await create_key(db, "before-0010"))
        assert account is not None
        before = [await _event_of_0009(db, account.id) for _ in range(3)]
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                text(
                    "INSERT INTO webhook_endpoints (id, account_id, url, description, events, "
                    "payload, enabled, max_in_flight, secret, version, created_at, updated_at) "
                    "VALUES ('we_old', :account, 'https://example.com', '', '[]', 'full', "
                    "true, 8, 'sealed', 1, :now, :now)"
                ),
                {"account": account.id, "now": clock.now()},
            )
        await upgrade(db)
        async with db.unit_of_work() as uow:
            after = await emit(uow, account.id, "ping", {"n": 3})

        async def whole_feed() -> list[str]:
            async with db.read() as conn:
                page = await feed.read(conn, account.id, after=feed.START, limit=10)
            return [row.id for row in page.rows]

        # Other transactions open on the PostgreSQL server hold the feed back a while.
        await until(lambda: _has(whole_feed, 4), within=60, what="the whole feed")
        assert await whole_feed() == [*sorted(before), after]
        async with db.read() as conn:
            scheme = await conn.scalar(
                select(endpoints.c.signature).where(endpoints.c.id == "we_old")
            )
        assert scheme == "hmac-sha256"


async def _event_of_0009(db: Database, account_id: str) -> str:
    """An event written as 0009's code wrote it (today's emit reads and writes columns added
    since); its id."""
    event_id = ids.new_id("evt")
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            text(
                "INSERT INTO webhook_events (id, account_id, type, data, created_at)"
                " VALUES (:id, :account, 'ping', '{}', :now)"
            ),
            {"id": event_id, "account": account_id, "now": clock.now()},
        )
    return event_id


# An endpoint with one delivery of one event, and two attempts of it; one more attempt whose
# delivery is gone (recorded after its endpoint was deleted, which 0013 allows).
_ATTEMPTED = [
    "INSERT INTO webhook_endpoints (id, account_id, url, description, events, payload, enabled,"
    " max_in_flight, secret, version, created_at, updated_at) VALUES ('we_1', :account,"
    " 'https://example.com', '', '[]', 'full', true, 8, 'sealed', 1, :now, :now)",
    "INSERT INTO webhook_events (id, account_id, type, data, created_at)"
    " VALUES ('evt_1', :account, 'ping', '{}', :now)",
    "INSERT INTO webhook_deliveries (id, account_id, endpoint_id, event_id, status, attempt_count,"
    " next_attempt_at, created_at, updated_at)"
    " VALUES ('dlv_1', :account, 'we_1', 'evt_1', 'failed', 2, :now, :now, :now)",
    "INSERT INTO webhook_attempts (id, delivery_id, attempted_at, status_code, latency_ms)"
    " VALUES ('att_1', 'dlv_1', :now, 500, 1.0), ('att_2', 'dlv_1', :now, 500, 1.0)",
]


async def _attempt_ids(db: Database) -> list[str]:
    async with db.read() as conn:
        return sorted(await conn.scalars(select(attempts.c.id)))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0013_keeps_attempts_and_goes_down_and_up_again(backend: str, tmp_path: Path) -> None:
    async with _old_database(backend, tmp_path) as db:
        await upgrade(db, "0012")
        account = await account_for_key(db, await create_key(db, "before-0013"))
        assert account is not None
        async with db.unit_of_work() as uow:
            for statement in _ATTEMPTED:
                await uow.conn.execute(text(statement), {"account": account.id, "now": clock.now()})
        await upgrade(db)
        assert await _attempt_ids(db) == ["att_1", "att_2"]
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                text(
                    "INSERT INTO webhook_attempts (id, delivery_id, attempted_at, latency_ms)"
                    " VALUES ('att_orphan', 'dlv_gone', :now, 1.0)"
                ),
                {"now": clock.now()},
            )

        def down_and_up(conn: Connection) -> None:
            command.downgrade(_config(conn), "0012")
            command.upgrade(_config(conn), "head")

        async with db.engine.begin() as conn:
            await conn.run_sync(down_and_up)
        await check_current(db)
        # The orphan went on the way down, where the foreign key came back.
        assert await _attempt_ids(db) == ["att_1", "att_2"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0014_raises_a_tiny_rate_limit_and_goes_down_and_up_again(
    backend: str, tmp_path: Path
) -> None:
    async with _old_database(backend, tmp_path) as db:
        await upgrade(db, "0013")
        account = await account_for_key(db, await create_key(db, "before-0014"))
        assert account is not None
        async with db.unit_of_work() as uow:
            await uow.conn.execute(text(_ATTEMPTED[0]), {"account": account.id, "now": clock.now()})
            await uow.conn.execute(text("UPDATE webhook_endpoints SET rate_limit = 1e-300"))
        await upgrade(db)
        async with db.read() as conn:
            assert await conn.scalar(select(endpoints.c.rate_limit)) == 0.01

        def down_and_up(conn: Connection) -> None:
            command.downgrade(_config(conn), "0013")
            command.upgrade(_config(conn), "head")

        async with db.engine.begin() as conn:
            await conn.run_sync(down_and_up)
        await check_current(db)


async def _job_indexes(db: Database) -> set[str]:
    query = (
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
        if db.is_sqlite
        else "SELECT indexname FROM pg_indexes WHERE tablename = 'jobs'"
    )
    async with db.read() as conn:
        return {name for name in await conn.scalars(text(query)) if "pending" in name}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_0015_indexes_pending_jobs_by_account_and_goes_down_and_up_again(
    backend: str, tmp_path: Path
) -> None:
    async with _old_database(backend, tmp_path) as db:
        await upgrade(db, "0014")
        assert await _job_indexes(db) == {"ix_jobs_pending_run_at"}
        account = await account_for_key(db, await create_key(db, "before-0015"))
        assert account is not None
        old = [await _job_of_0014(db, account.id) for _ in range(2)]
        await upgrade(db)
        assert await _job_indexes(db) == {"ix_jobs_pending_queue"}
        new = await jobs.enqueue(db, "report")
        claimed = await store_for(db).claim(
            db, worker_id="wrk_m", kinds=["report"], limit=2, lease=30
        )
        assert {job.id for job in claimed} == {old[0].id, new.id}  # a turn each

        def down_and_up(conn: Connection) -> None:
            command.downgrade(_config(conn), "0014")
            assert {ix["name"] for ix in inspect(conn).get_indexes("jobs")} >= {
                "ix_jobs_pending_run_at"
            }
            command.upgrade(_config(conn), "head")

        async with db.engine.begin() as conn:
            await conn.run_sync(down_and_up)
        await check_current(db)
        assert await _job_indexes(db) == {"ix_jobs_pending_queue"}


async def _job_of_0014(db: Database, account_id: str) -> jobs.Job:
    """A pending job written as 0014's code wrote it (today's writes columns added since)."""
    job = jobs.new_job("report", account_id=account_id)
    async with db.unit_of_work() as uow:
        await uow.conn.execute(
            text(
                "INSERT INTO jobs (id, account_id, kind, status, payload, progress, attempts, "
                "max_attempts, run_at, cancel_requested, has_result, version, created_at, "
                "updated_at) VALUES (:id, :account, 'report', 'pending', '{}', 0, 0, 3, :now, "
                "false, false, 1, :now, :now)"
            ),
            {"id": job.id, "account": account_id, "now": job.created_at},
        )
    return job


async def _has(read: Callable[[], Awaitable[list[str]]], n: int) -> bool:
    return len(await read()) >= n


@pytest.fixture
def empty_pg_url() -> Iterator[str]:
    """A PostgreSQL database nobody has migrated, with a password in its URL."""
    name, url = make_pg_database()
    yield url.replace("postgres@", "postgres:hunter2@", 1)
    drop_pg_database(name)


async def test_missing_table_on_postgresql_is_one_line_naming_the_command(
    empty_pg_url: str,
) -> None:
    db = Database(empty_pg_url)
    try:
        with pytest.raises(TablesMissing) as raised:
            await SqlRecordStore(db).prepare()
        message = str(raised.value)
        assert message.startswith("table idempotency_records is missing: run `ustun migrate`")
        assert "USTUN_DATABASE_URL=postgresql://postgres:***@" in message
        assert "\n" not in message
        assert "hunter2" not in message
        with pytest.raises(TablesMissing, match="table webhook_inbox is missing"):
            await DatabaseInbox(db).prepare()
        assert await current_revision(db) is None  # nothing changed unasked
        await DatabaseInbox(db, create_tables=True).prepare()
        await SqlRecordStore(db).prepare()
        assert await current_revision(db) == head_revision()
    finally:
        await db.dispose()


async def test_sqlite_tables_are_created_on_first_use(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        await DatabaseInbox(db).prepare()
        assert await DatabaseInbox(db).claim("msg_1", "ping")
        await check_current(db)
    finally:
        await db.dispose()


async def test_middleware_refuses_to_start_without_its_table(empty_pg_url: str) -> None:
    """The lifespan startup fails with the one line, before the app's own startup runs."""
    db = Database(empty_pg_url)
    started: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        started.append((await receive())["type"])

    middleware = IdempotencyMiddleware(app, SqlRecordStore(db), transactional=True)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await middleware({"type": "lifespan"}, receive, send)
    finally:
        await db.dispose()
    assert sent == [
        {"type": "lifespan.startup.failed", "message": sent[0]["message"]},
    ]
    assert sent[0]["message"].startswith("table idempotency_records is missing")
    assert started == []
