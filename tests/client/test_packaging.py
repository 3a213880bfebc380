"""`pip install ustun` (httpx only) is enough for the client and for verifying webhooks:
nothing of the server is imported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ustun

SERVER_ONLY = ("sqlalchemy", "fastapi", "starlette", "aiohttp", "pydantic", "uvicorn")
PACKAGE = Path(ustun.__file__).parent


@pytest.mark.parametrize(
    "statement", ["import ustun.client", "import ustun.errors", "from ustun.webhooks import verify"]
)
def test_importing_pulls_in_no_server_dependency(statement: str) -> None:
    code = (
        f"import json, sys; {statement}; "
        f"print(json.dumps([m for m in {SERVER_ONLY!r} if m in sys.modules]))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []


def test_the_errors_import_nothing_of_ustun_so_that_every_layer_may_raise_them() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, ustun.errors; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [m for m in loaded if m.startswith("ustun.")] == ["ustun.errors"]


# The reference service's stack: `ustun[server]` only, never needed by the library.
SERVICE_ONLY = (
    "fastapi",
    "uvicorn",
    "typer",
    "rich",
    "prometheus_client",
    "jinja2",
    "itsdangerous",
    "yaml",
    "multipart",
    "fpdf",
    "pydantic",
    "pydantic_settings",
    "redis",
)
LIBRARY = (
    "ustun.idempotency",
    "ustun.concurrency",
    "ustun.jobs",
    "ustun.store.migrate",
    "ustun.webhooks.sending.outbox",
    "ustun.webhooks.sending.dispatcher",
    "ustun.webhooks.receiving.receiver",
)


@pytest.mark.parametrize("module", LIBRARY)
def test_the_library_runs_without_the_service_stack(module: str) -> None:
    """`ustun[middleware]` is enough: importing a pillar with the service's packages missing."""
    code = (
        "import importlib.abc, sys\n"
        "class Missing(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {SERVICE_ONLY!r}:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Missing())\n"
        f"import {module}\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_the_middleware_extra_leaves_out_the_service_stack() -> None:
    import tomllib

    pyproject = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    names = {re.split(r"[\[<>=]", spec)[0].replace("-", "_") for spec in extras["middleware"]}
    # Typer (and rich) come with it for `ustun migrate` and `ustun keys`.
    assert names.isdisjoint({"fastapi", "uvicorn", "prometheus_client", "fpdf2"})
