"""examples/litestar_shop/README.md runs as written, on SQLite: its set-up block in bash, its
serving block's uvicorn and worker as it spells them (on a free port), and each curl of the
other blocks against them, its answer checked against the comment after it: the status, then
a header the answer carries or a text of its body."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from example_shops import BIN, answers_as_commented, readme_blocks
from litestar_support import EXAMPLE, Shop
from support import free_port

pytestmark = pytest.mark.e2e

README = EXAMPLE / "README.md"
SETUP, SERVE, REQUESTS = readme_blocks(README)
README_DATABASE = "$PWD/shop.sqlite3"
README_PORT = "--port 8000"


@pytest.fixture(scope="module")
def readme_shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Shop, str]]:
    """The set-up block run on a fresh SQLite file, then the serving block's processes; the
    shop and the address uvicorn listens on."""
    folder = tmp_path_factory.mktemp("readme")
    database = folder / "litestar_shop.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOP_", "USTUN_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    setup = SETUP.replace(README_DATABASE, str(database))
    subprocess.run(["bash", "-ec", setup], cwd=EXAMPLE, env=env, check=True, timeout=120)
    url = f"sqlite:///{database}"
    shop = Shop(url, {**env, "SHOP_DATABASE_URL": url}, folder)
    port = free_port()
    try:
        uvicorn, _ = [
            shop.start(*shlex.split(line.replace(README_PORT, f"--port {port}")), log=f"{n}.log")
            for n, line in enumerate(SERVE.splitlines())
        ]
        shop.wait_listening(uvicorn, f"http://127.0.0.1:{port}", folder / "0.log")
        yield shop, f"127.0.0.1:{port}"
    finally:
        shop.stop_all()


def test_the_serving_block_is_uvicorn_and_the_worker() -> None:
    assert [shlex.split(line)[:2] for line in SERVE.splitlines()] == [
        ["uvicorn", "shop:app"],
        ["litestar", "--app"],
    ]


def test_every_request_answers_as_its_comment_says(readme_shop: tuple[Shop, str]) -> None:
    shop, address = readme_shop
    assert len(REQUESTS) == 11
    for line in REQUESTS:
        answers_as_commented(line, address, shop.logs)
