"""examples/django_shop/README.md runs as written: its ```sh blocks, in order, as one bash
script in a copy of the example, on a fresh SQLite database and a free port. A command's
`# → text` comment is a line it must print (its output's lines, in order, must include each).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from django_support import EXAMPLE
from support import free_port

pytestmark = pytest.mark.e2e

README = EXAMPLE / "README.md"
FENCE = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)
EXPECTED = re.compile(r"#\s*→\s*(.+?)\s*$", re.M)
ADDRESS = "127.0.0.1:8000"


def _script(port: int) -> tuple[str, list[str]]:
    """The README's blocks as one script on `port` (once gunicorn starts, the script waits for
    it to answer, as a reader would), and the texts their comments expect, in order."""
    blocks = FENCE.findall(README.read_text())
    assert blocks, "no ```sh block in the example's README"
    lines = ["set -u"]
    for block in blocks:
        for line in block.splitlines():
            lines.append(line.replace(ADDRESS, f"127.0.0.1:{port}"))
            if line.startswith("gunicorn "):
                url = f"http://127.0.0.1:{port}/payments"
                lines.append(f"until curl -s -o /dev/null {url}; do sleep 0.2; done")
    return "\n".join(lines) + "\n", EXPECTED.findall("\n".join(blocks))


def test_the_readme_runs(tmp_path: Path) -> None:
    shop = tmp_path / "django_shop"
    shutil.copytree(EXAMPLE, shop, ignore=shutil.ignore_patterns("shop.sqlite3*", "__pycache__"))
    script, expected = _script(free_port())
    env = {
        **os.environ,
        "SHOP_DATABASE_URL": f"sqlite:///{tmp_path / 'shop.sqlite3'}",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "SHOP_FAST_PASSWORDS": "1",
    }
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=shop,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        # The server and the worker the README started in the background, if `kill` did not.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    logs = "".join(p.read_text(errors="replace") for p in shop.glob("*.log"))
    assert proc.returncode == 0, f"{output}\n{logs}"
    printed = output.splitlines()
    for text in expected:
        at = next((i for i, line in enumerate(printed) if text in line), None)
        assert at is not None, f"expected {text!r} in:\n{output}\n{logs}"
        printed = printed[at + 1 :]
