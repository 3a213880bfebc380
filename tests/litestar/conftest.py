"""The example Litestar shop (examples/litestar_shop) on a fresh SQLite or PostgreSQL database,
one of each per run: its tables (`python shop.py`), ustun's (`litestar --app shop:app ustun
migrate`), uvicorn serving it with two worker processes, and its worker once a test asks."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator

import pytest

from example_shops import SECRET_KEY, Served
from litestar_support import Shop
from support import BACKENDS, drop_pg_database, make_pg_database


@pytest.fixture(scope="session", params=BACKENDS)
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shop]:
    """The example shop on a fresh database, with its tables and ustun's."""
    folder = tmp_path_factory.mktemp("litestar-shop")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'shop.sqlite3'}"
    else:
        pg_name, url = make_pg_database()
    faults = folder / "faults"
    faults.mkdir()
    env = {
        **os.environ,
        "SHOP_DATABASE_URL": url,
        "SHOP_SECRET_KEY": SECRET_KEY,
        "SHOP_ALLOW_PRIVATE": "1",
        "SHOP_FAULTS": str(faults),
    }
    shop = Shop(url, env, folder)
    try:
        shop.create_tables()
        shop.litestar("ustun", "migrate")
        yield shop
    finally:
        shop.stop_all()
        if pg_name is not None:
            drop_pg_database(pg_name)


@pytest.fixture(scope="session")
def served(shop: Shop) -> Served:
    """The shop under uvicorn: 2 worker processes."""
    return shop.serve(workers=2)


@pytest.fixture(scope="session")
def start_worker(shop: Shop) -> Callable[[], None]:
    """Starts the shop's worker (`litestar --app shop:app ustun worker`) beside its server when
    first called: a test may follow a job from before any worker runs."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        if not started:
            started.append(shop.start_worker())

    return start
