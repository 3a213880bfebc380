"""Real-process tests: each gets an empty database of its own on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support import BACKENDS, drop_pg_database, make_pg_database


@pytest.fixture(params=BACKENDS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nobody has migrated yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ustun.db'}"
        return
    name, url = make_pg_database()
    yield url
    drop_pg_database(name)


@pytest.fixture(scope="module", params=BACKENDS)
def module_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """An empty database of each backend, shared by the servers of one test module."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('module-sqlite') / 'ustun.db'}"
        return
    name, url = make_pg_database()
    yield url
    drop_pg_database(name)
