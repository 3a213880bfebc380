"""Configuration mistakes: one or two lines naming the setting and the fix, exit 2, no secret.

Every mistake is tried on `ustun serve`, `worker`, `migrate` and `keys create`, as real
processes; none of them may print a traceback or the value of a secret.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from support import PG_SERVER, USTUN, free_port, run_ustun

pytestmark = pytest.mark.e2e
COMMANDS = (("serve", "--port", "0"), ("worker",), ("migrate",), ("keys", "create"))
KEY = os.environ["USTUN_SECRET_KEY"]
PASSWORD = "pw-that-must-not-show"


def _refused(
    env: dict[str, str], expected: str, commands: tuple[tuple[str, ...], ...] = COMMANDS
) -> None:
    """Run every command at once; each must exit 2 with `expected` and no secret."""
    with ThreadPoolExecutor(len(commands)) as pool:
        runs = list(
            pool.map(lambda args: run_ustun(*args, env={"USTUN_SECRET_KEY": KEY, **env}), commands)
        )
    for args, done in zip(commands, runs, strict=True):
        shown = done.stdout + done.stderr
        assert done.returncode == 2, (args, shown)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert 1 <= len(lines) <= 2, (args, shown)
        assert expected in lines[0], (args, shown)
        assert KEY not in shown, (args, shown)
        assert PASSWORD not in shown, (args, shown)


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ustun.db'}"


def _postgresql(**parts: str | int) -> str:
    """The test server's URL with `parts` changed, and a password that must never show."""
    return make_url(PG_SERVER).set(password=PASSWORD, **parts).render_as_string(False)


def test_unsupported_database_url() -> None:
    _refused(
        {"USTUN_DATABASE_URL": f"mysql://ustun:{PASSWORD}@localhost/ustun"},
        "USTUN_DATABASE_URL is invalid: unsupported database URL 'mysql': use sqlite:///path",
    )


def test_unparsable_database_url() -> None:
    _refused(
        {"USTUN_DATABASE_URL": f"postgresql://ustun:{PASSWORD}@localhost:fivefour/ustun"},
        "USTUN_DATABASE_URL is invalid: not a database URL: use sqlite:///path",
    )


def test_database_that_does_not_exist() -> None:
    name = f"ustun_missing_{uuid.uuid4().hex[:8]}"
    url = _postgresql(database=name)
    where = f"{make_url(url).host}:{make_url(url).port or 5432}"
    _refused(
        {"USTUN_DATABASE_URL": url},
        f"database '{name}' does not exist on PostgreSQL at {where}: "
        "create it, or fix USTUN_DATABASE_URL",
    )


def test_postgresql_not_listening() -> None:
    port = free_port()
    url = _postgresql(port=port)
    _refused(
        {"USTUN_DATABASE_URL": url},
        f"cannot connect to PostgreSQL at {make_url(url).host}:{port} (connection refused): "
        "start it there, or fix USTUN_DATABASE_URL",
    )


def test_sqlite_directory_missing(tmp_path: Path) -> None:
    _refused(
        {"USTUN_DATABASE_URL": _sqlite(tmp_path / "no" / "such" / "dir")},
        "its directory must exist and be writable; fix USTUN_DATABASE_URL",
    )


@pytest.mark.parametrize("variable", ["USTUN_SECRET_KEY", "USTUN_SECRET_KEY_PREVIOUS"])
def test_short_secret_key_is_named_not_echoed(variable: str, tmp_path: Path) -> None:
    _refused(
        {"USTUN_DATABASE_URL": _sqlite(tmp_path), variable: PASSWORD},
        f"{variable} is invalid: must be at least 32 characters",
    )


def test_any_invalid_setting_names_its_variable(tmp_path: Path) -> None:
    # Not USTUN_PORT: `serve --port 0` overrides it, so it is not read.
    _refused(
        {"USTUN_DATABASE_URL": _sqlite(tmp_path), "USTUN_MAX_BODY": "abc"},
        "USTUN_MAX_BODY is invalid: Input should be a valid integer",
    )


def test_job_module_that_does_not_import(tmp_path: Path) -> None:
    _refused(
        {"USTUN_DATABASE_URL": _sqlite(tmp_path), "USTUN_JOB_MODULES": "no_such_app.jobs"},
        "USTUN_JOB_MODULES names 'no_such_app.jobs', which is not importable",
        commands=COMMANDS[:2],
    )
    assert list(tmp_path.iterdir()) == []  # checked before serve creates the database


def test_serve_help_names_the_environment_variables() -> None:
    shown = run_ustun("serve", "--help", env={})
    assert shown.returncode == 0
    assert "(env USTUN_HOST)" in shown.stdout
    assert "(env USTUN_PORT)" in shown.stdout


def test_client_only_install_says_which_extra_to_install(tmp_path: Path) -> None:
    """Without the middleware or server extra there is no typer: the script says what to
    install."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['typer'] = None\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [USTUN, "--help"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "error: the ustun command needs an extra: pip install 'ustun[middleware]' (migrate, "
        "keys) or 'ustun[server]' (every command)\n"
    )
