"""The example shop (examples/django_shop) on a fresh SQLite or PostgreSQL database per test
module (`shop`); `shop.serve()` starts gunicorn on it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from django_support import EXAMPLE, Shop
from example_shops import SECRET_KEY, USERS
from support import BACKENDS, drop_pg_database, make_pg_database


@pytest.fixture(scope="module", params=BACKENDS)
def shop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shop]:
    """The example shop on a fresh, migrated database with users ann and bob."""
    folder = tmp_path_factory.mktemp("shop")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'shop.sqlite3'}"
    else:
        pg_name, url = make_pg_database()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
        "SHOP_DATABASE_URL": url,
        "SHOP_SECRET_KEY": SECRET_KEY,
        "SHOP_ALLOW_PRIVATE": "1",
        "SHOP_FAULTS": str(folder),
        "SHOP_FAST_PASSWORDS": "1",
    }
    shop = Shop(url, env, folder)
    try:
        shop.manage("migrate", "--no-input")
        for user, password in USERS.items():
            shop.manage(
                "shell",
                "-c",
                f"from django.contrib.auth.models import User; "
                f"User.objects.create_user({user!r}, password={password!r})",
            )
        yield shop
    finally:
        shop.stop_all()
        if pg_name is not None:
            drop_pg_database(pg_name)
