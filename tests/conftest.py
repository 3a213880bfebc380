"""Fixtures: every storage-touching test runs on SQLite and on a real PostgreSQL.

PostgreSQL: a fresh database per test session on 127.0.0.1:5432 (or `USTUN_TEST_PG_URL`),
dropped afterwards. Each test gets its own account, so tests never see each other's data.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import settings

from support import BACKENDS, drop_pg_database, make_pg_database, migrate_database
from ustun.service import create_app
from ustun.service.plumbing.accounts import create_key
from ustun.settings import Settings
from ustun.store import Database

# Webhook secrets are encrypted under this key; PostgreSQL refuses to start without one.
# Set in the environment so in-process apps and `ustun` subprocesses all share it.
os.environ.setdefault("USTUN_SECRET_KEY", "test-only-secret-key-0123456789abcdef")

# Property tests check what is computed, not how fast: no per-example deadline, which a loaded
# machine running the suite four-wide would otherwise break.
settings.register_profile("ustun", deadline=None)
settings.load_profile("ustun")


@pytest.fixture(scope="session")
def postgresql_url() -> Iterator[str]:
    """A migrated PostgreSQL database for this test session."""
    name, url = make_pg_database()
    migrate_database(url)
    yield url
    drop_pg_database(name)


@pytest.fixture
def own_postgresql_url() -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own: its tables start empty."""
    name, url = make_pg_database()
    migrate_database(url)
    yield url
    drop_pg_database(name)


@pytest.fixture(params=BACKENDS)
def own_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database of this test's own, once per backend: its tables start empty."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("own_postgresql_url")
        return url
    url = f"sqlite:///{tmp_path / 'ustun.db'}"
    migrate_database(url)
    return url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite database file for this test session."""
    path: Path = tmp_path_factory.mktemp("sqlite") / "ustun.db"
    url = f"sqlite:///{path}"
    migrate_database(url)
    return url


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    """The URL of a migrated database, once per backend."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """A `Database` on the current backend, bound to this test's event loop."""
    database = Database(database_url)
    yield database
    await database.dispose()


@pytest.fixture
async def pg(postgresql_url: str) -> AsyncIterator[Database]:
    """A `Database` on PostgreSQL only, for what exists only there (NOTIFY, autocommit)."""
    database = Database(postgresql_url)
    yield database
    await database.dispose()


@pytest.fixture
async def api_key(db: Database) -> str:
    """A key of a brand-new account, so the test sees only its own data."""
    return await create_key(db, f"test-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings for an in-process app on the current backend, which runs the tests' job kinds."""
    return Settings(database_url=database_url, job_modules="job_kinds")


@pytest.fixture
async def client(
    settings: Settings, db: Database, api_key: str
) -> AsyncIterator[httpx.AsyncClient]:
    """An authenticated HTTP client talking to the app in-process (lifespan included)."""
    app = create_app(settings, db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://testserver",
            headers={"authorization": f"Bearer {api_key}"},
        ) as http:
            yield http


@pytest.fixture
async def app(settings: Settings, db: Database) -> AsyncIterator[FastAPI]:
    """The service in-process on the current backend, its lifespan running."""
    application = create_app(settings, db=db)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app` that keeps cookies and is not logged in (nor sends a key)."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        yield http
