"""`pip install ustun` (httpx only) is enough for the client and for verifying webhooks:
nothing of the server is imported."""

from __future__ import annotations

import ast
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


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    ("layer", "allowed"),
    [
        ("client", ("ustun.defaults", "ustun.errors", "ustun.http", "ustun.client", "httpx")),
        # ed25519 (`v1a`) signing is arithmetic, not I/O: `cryptography`, imported on first use.
        ("http", ("ustun.defaults", "ustun.errors", "ustun.http", "cryptography")),
    ],
)
def test_a_layer_imports_only_what_it_may(layer: str, allowed: tuple[str, ...]) -> None:
    for path in (PACKAGE / layer).rglob("*.py"):
        for name in _imports(path):
            top = name.split(".", 1)[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            assert any(name == a or name.startswith(f"{a}.") for a in allowed), (
                f"{path.name} imports {name}"
            )


def test_the_defaults_import_nothing_so_that_every_layer_may_import_them() -> None:
    assert _imports(PACKAGE / "defaults.py") <= {"__future__"}


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
