"""The `ustun` command in a new user's first hour: each mistake is one line that says what to
do, nothing is created on disk before every check passed, the database in use is named, and
`ustun migrate` works with `ustun[middleware]` alone. Real processes throughout.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sqlalchemy.engine import make_url

from support import (
    API_KEY,
    USTUN,
    Server,
    UstunProcess,
    drop_pg_database,
    make_pg_database,
    wait_for,
)

pytestmark = pytest.mark.e2e
KEY = os.environ["USTUN_SECRET_KEY"]
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
MISSING_FILE = (
    "error: no SQLite database at {path}: run `ustun migrate` (or `ustun serve`) to create it, "
    "or fix USTUN_DATABASE_URL\n"
)


def _ustun(
    *args: str, cwd: Path, env: dict[str, str], stdin: str = "", path: Iterable[Path] = ()
) -> subprocess.CompletedProcess[str]:
    """`ustun <args>` to its end in `cwd`, in a bare environment plus `env`; `path` goes
    before the tree under test on PYTHONPATH."""
    python_path = [*map(str, path), *filter(None, [os.environ.get("PYTHONPATH")])]
    bare = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(python_path)}
    return subprocess.run(
        [USTUN, *args],
        cwd=cwd,
        env={**bare, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _sqlite(directory: Path) -> dict[str, str]:
    return {"USTUN_DATABASE_URL": f"sqlite:///{directory / 'ustun.db'}", "USTUN_SECRET_KEY": KEY}


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ("serve", "--port", "70000"),
            {},
            "error: --port is invalid: Input should be less than or equal to 65535.",
        ),
        (
            ("serve",),
            {"USTUN_PORT": "70000"},
            "error: USTUN_PORT is invalid: Input should be less than or equal to 65535. "
            "Fix it in the environment.",
        ),
        (
            ("serve", "--port", "-1"),
            {},
            "error: --port is invalid: Input should be greater than or equal to 0.",
        ),
    ],
    ids=["option", "environment", "negative"],
)
def test_a_port_out_of_range_is_one_line_whether_an_option_or_a_variable(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    """`--port 70000` printed a 90-line traceback, after making the database and key file."""
    refused = _ustun(*args, cwd=tmp_path, env={"USTUN_SECRET_KEY": KEY, **env})
    assert refused.returncode == 2, refused.stderr
    assert (refused.stdout, refused.stderr) == ("", expected + "\n")
    assert list(tmp_path.iterdir()) == []


def test_variables_ustun_does_not_read_are_named_with_the_setting_meant(tmp_path: Path) -> None:
    """Misspelled or unprefixed, each is warned about; migrate names the file it made."""
    env = {
        "USTUN_DB_URL": "sqlite:///elsewhere.db",
        "USTUN_PROT": "9000",
        "DATABASE_URL": "postgresql://app@db/app",
    }
    done = _ustun("migrate", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: USTUN_DB_URL is not a ustun setting and is ignored: "
        "did you mean USTUN_DATABASE_URL?",
        "warning: USTUN_PROT is not a ustun setting and is ignored: did you mean USTUN_PORT?",
        "warning: DATABASE_URL is set but ignored: ustun reads USTUN_DATABASE_URL "
        "(e.g. USTUN_DATABASE_URL=$DATABASE_URL)",
        f"database schema is up to date: sqlite:///{tmp_path / 'ustun.db'}",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["ustun.db"]


def test_migrate_names_a_postgresql_database_without_its_password(tmp_path: Path) -> None:
    name, url = make_pg_database()
    try:
        password = "pw-that-must-not-show"  # the test server trusts local connections
        with_password = make_url(url).set(password=password).render_as_string(False)
        done = _ustun("migrate", cwd=tmp_path, env={"USTUN_DATABASE_URL": with_password})
        assert done.returncode == 0, done.stderr
        masked = make_url(with_password).render_as_string(hide_password=True)
        assert masked.count("***") == 1
        assert done.stderr == f"database schema is up to date: {masked}\n"
        assert password not in done.stderr
    finally:
        drop_pg_database(name)


def test_serve_names_the_database_it_serves(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)["USTUN_DATABASE_URL"]
    server = Server(url, tmp_path / "serve.log").start()
    try:
        logged = [json.loads(line) for line in server.output().splitlines() if line[:1] == "{"]
        assert [e["message"] for e in logged if e["logger"] == "ustun.cli"] == [
            f"serving the database {url}"
        ]
    finally:
        server.stop()


def test_a_port_in_use_is_refused_before_the_database_and_key_file_are_made(
    tmp_path: Path,
) -> None:
    env = _sqlite(tmp_path)
    del env["USTUN_SECRET_KEY"]  # so that the key file would be generated beside the database
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        refused = _ustun("serve", "--port", str(port), cwd=tmp_path, env=env)
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: port {port} on 127.0.0.1 is in use: choose another with --port or USTUN_PORT\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ("keys", "list"),
        ("keys", "create"),
        ("worker",),
        ("rotate-key",),
        ("serve", "--no-migrate", "--port", "0"),
    ],
)
def test_a_command_that_needs_the_database_creates_no_sqlite_file(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`keys list` on a missing file left an empty one behind."""
    refused = _ustun(*args, cwd=tmp_path, env=_sqlite(tmp_path))
    assert refused.returncode == 2
    assert (refused.stdout, refused.stderr) == ("", MISSING_FILE.format(path=tmp_path / "ustun.db"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [("serve", "--no-migrate", "--port", "0"), ("keys", "list")])
def test_an_out_of_date_schema_is_a_refusal_exit_1(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Not a usage mistake (2): the database is behind, as docs/cli.md says."""
    sqlite3.connect(tmp_path / "ustun.db").close()  # there, never migrated
    refused = _ustun(*args, cwd=tmp_path, env=_sqlite(tmp_path))
    assert refused.returncode == 1
    assert refused.stderr == (
        "error: database schema is at revision none, this ustun needs "
        f"{_head()}: run `ustun migrate` (or start `ustun serve` without --no-migrate)\n"
    )


def _head() -> str:
    from ustun.store.migrate import head_revision

    head = head_revision()
    assert head is not None
    return head


def test_the_worker_logs_its_start_and_its_stop(tmp_path: Path) -> None:
    env = _sqlite(tmp_path)
    assert _ustun("migrate", cwd=tmp_path, env=env).returncode == 0
    worker = UstunProcess(["worker", "--concurrency", "3"], env, tmp_path / "worker.log").start()
    try:
        wait_for(lambda: "worker started" in worker.output(), what="the worker's start line")
    finally:
        assert worker.stop() == 0, worker.output()
    logged = [json.loads(line) for line in worker.output().splitlines()]
    assert [e["message"] for e in logged if e["logger"] == "ustun.cli"] == [
        f"worker started on the database {env['USTUN_DATABASE_URL']}: up to 3 jobs at once "
        "(kinds report), webhook delivery and the sweepers",
        "worker stopped",
    ]


@pytest.mark.parametrize(
    ("given", "env", "source"),
    [
        ("not-a-secret", {}, "--secret"),
        ("ustun_sk_" + "a" * 43, {}, "--secret"),
        ("", {"USTUN_LISTEN_SECRET": "not-a-secret"}, "USTUN_LISTEN_SECRET"),
    ],
    ids=["stdin", "api-key", "environment"],
)
def test_listen_refuses_what_is_no_signing_key_in_one_line(
    tmp_path: Path, given: str, env: dict[str, str], source: str
) -> None:
    """`--secret -` reads one line of standard input; what it reads must be a whsec_/whpk_ key."""
    args = ("listen", "--secret", "-") if given else ("listen",)
    refused = _ustun(*args, "--port", "0", cwd=tmp_path, env=env, stdin=given + "\n")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: {source} is invalid: add the key's prefix: `whsec_` for a secret, `whpk_` for "
        "an ed25519 public key\n"
    )


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def _installed_by(requirements: Iterable[str]) -> set[str]:
    """The distributions `pip install` of `requirements` brings (markers of this platform)."""
    ours = _extras()
    seen: set[tuple[str, str]] = set()
    todo = list(requirements)
    while todo:
        wanted = Requirement(todo.pop())
        name = canonicalize_name(wanted.name)
        for extra in ("", *wanted.extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            if name == "ustun":
                todo += ours[extra]
                continue
            for text in metadata.requires(wanted.name) or []:
                marker = Requirement(text).marker
                if marker.evaluate({"extra": extra}) if marker else not extra:
                    todo.append(text)
    return {name for name, _ in seen}


def _only_installed(tmp_path: Path, extra: str) -> Path:
    """A directory for PYTHONPATH whose sitecustomize makes every installed distribution that
    `pip install 'ustun[extra]'` would not bring unimportable, as if it were not installed."""
    kept = _installed_by([f"ustun[{extra}]"])
    modules: dict[str, set[str]] = {}
    for module, distributions in metadata.packages_distributions().items():
        modules.setdefault(module, set()).update(map(canonicalize_name, distributions))
    absent = sorted(m for m, dists in modules.items() if not dists & kept)
    site = tmp_path / f"only-{extra}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.modules.update(dict.fromkeys({absent!r}))\n"
    )
    assert {"fastapi", "uvicorn"} <= set(absent)
    return site


def test_migrate_and_keys_work_with_the_middleware_extra_alone(tmp_path: Path) -> None:
    """The README sends library users to `ustun migrate`, which asked for the server extra."""
    site = _only_installed(tmp_path, "middleware")
    env = _sqlite(tmp_path)
    migrated = _ustun("migrate", cwd=tmp_path, env=env, path=[site])
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stderr == f"database schema is up to date: {env['USTUN_DATABASE_URL']}\n"
    made = _ustun("keys", "create", cwd=tmp_path, env=env, path=[site])
    assert made.returncode == 0, made.stderr
    assert API_KEY.fullmatch(made.stdout.strip())

    served = _ustun("serve", cwd=tmp_path, env=env, path=[site])
    assert served.returncode == 2
    assert served.stderr == (
        "error: ustun serve needs the server extra (uvicorn is not installed): "
        "pip install 'ustun[server]'\n"
    )
