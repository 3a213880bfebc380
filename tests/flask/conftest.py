"""The example Flask shop on a fresh SQLite or PostgreSQL database, one of each per run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from example_shops import SECRET_KEY, Served
from flask_support import Shop
from support import BACKENDS, drop_pg_database, make_pg_database


@pytest.fixture(scope="session", params=BACKENDS)
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shop]:
    """The example shop on a fresh database: its tables (`flask --app shop init-db`) and
    ustun's (`flask --app shop ustun migrate`)."""
    folder = tmp_path_factory.mktemp("flask-shop")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'shop.sqlite3'}"
        app_url = url
    else:
        pg_name, url = make_pg_database()
        app_url = make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)
    faults = folder / "faults"
    faults.mkdir()
    env = {
        **os.environ,
        "SHOP_DATABASE_URL": app_url,
        "SHOP_SECRET_KEY": SECRET_KEY,
        "SHOP_ALLOW_PRIVATE": "1",
        "SHOP_FAULTS": str(faults),
        # A few endpoints per account, so that a test reaches the quota.
        "USTUN_MAX_ENDPOINTS": "3",
    }
    shop = Shop(url, env, folder)
    try:
        shop.flask("init-db")
        shop.flask("ustun", "migrate")
        yield shop
    finally:
        shop.stop_all()
        if pg_name is not None:
            drop_pg_database(pg_name)


@pytest.fixture(scope="session")
def served(shop: Shop) -> Served:
    """The shop under gunicorn: 4 processes of 6 threads."""
    return shop.serve(workers=4, threads=6)
