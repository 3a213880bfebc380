"""examples/flask_shop/README.md runs as written, on SQLite: its set-up block in bash, its
serving block's gunicorn and worker as it spells them (on a free port), and each curl of the
other blocks against them, its answer checked against the comment after it: the status, then
a header the answer carries or a text of its body."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from example_shops import BIN, SECRET_KEY
from flask_support import EXAMPLE, Shop
from support import free_port

pytestmark = pytest.mark.e2e

README = EXAMPLE / "README.md"
SH = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)
SETUP, SERVE, *REQUESTS = SH.findall(README.read_text())
README_DATABASE = "$PWD/shop.sqlite3"
README_ADDRESS = "127.0.0.1:8000"
EXPECTED = re.compile(r"^(?P<command>.*?)  # (?P<status>\d{3})(?: (?P<shown>.+))?$")


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
    lines = [line for block in REQUESTS for line in block.splitlines()]
    assert lines
    for line in lines:
        expected = EXPECTED.match(line)
        assert expected is not None, f"no `# <status>` comment: {line}"
        command = expected["command"].replace("localhost:8000", address)
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=30, check=True
        )
        head, _, body = done.stdout.replace("\r\n", "\n").partition("\n\n")
        status = head.split("\n", 1)[0].split()[1]
        assert status == expected["status"], f"{line}\n{done.stdout}\n{shop.logs()}"
        shown = expected["shown"]
        if shown is not None and ": " in shown:
            name, value = shown.split(": ", 1)
            assert f"\n{name.lower()}: {value}" in head.lower(), f"{line}\n{done.stdout}"
        elif shown is not None:
            assert shown in body, f"{line}\n{done.stdout}"
