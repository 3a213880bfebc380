"""examples/flask_shop/README.md runs as written, on SQLite: its set-up block in bash, its
serving block's gunicorn and worker as it spells them (on a free port), and each curl of the
other blocks against them, its answer checked against the comment after it: the status, then
a header the answer carries or a text of its body."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from example_shops import BIN, SECRET_KEY, answers_as_commented, readme_blocks
from flask_support import EXAMPLE, Shop
from support import free_port

pytestmark = pytest.mark.e2e

README = EXAMPLE / "README.md"
SETUP, SERVE, REQUESTS = readme_blocks(README)
README_DATABASE = "$PWD/shop.sqlite3"
README_ADDRESS = "127.0.0.1:8000"


@pytest.fixture(scope="module")
def readme_shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Shop, str]]:
    """The set-up block run on a fresh SQLite file, then the serving block's processes; the
    shop and the address gunicorn listens on."""
    folder = tmp_path_factory.mktemp("readme")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    setup = SETUP.replace(README_DATABASE, str(folder / "flask_shop.sqlite3"))
    subprocess.run(["bash", "-ec", setup], cwd=EXAMPLE, env=env, check=True, timeout=120)
    url = f"sqlite:///{folder / 'flask_shop.sqlite3'}"
    shop = Shop(url, {**env, "SHOP_DATABASE_URL": url, "SHOP_SECRET_KEY": SECRET_KEY}, folder)
    address = f"127.0.0.1:{free_port()}"
    try:
        gunicorn, *_ = [
            shop.start(*shlex.split(line.replace(README_ADDRESS, address)), log=f"{number}.log")
            for number, line in enumerate(SERVE.splitlines())
        ]
        shop.wait_listening(gunicorn, address, folder / "0.log")
        yield shop, address
    finally:
        shop.stop_all()


def test_the_serving_block_is_gunicorn_and_the_worker() -> None:
    assert [shlex.split(line)[:2] for line in SERVE.splitlines()] == [
        ["gunicorn", "-w"],
        ["flask", "--app"],
    ]


def test_every_request_answers_as_its_comment_says(readme_shop: tuple[Shop, str]) -> None:
    shop, address = readme_shop
    assert REQUESTS
    for line in REQUESTS:
        answers_as_commented(line, address, shop.logs)
