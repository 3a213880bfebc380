"""Without USTUN_SECRET_KEY: SQLite generates a key file; PostgreSQL refuses to start."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from support import USTUN, migrate_database, wait_for


@pytest.fixture
def keyless_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "USTUN_SECRET_KEY"}


def test_postgresql_refuses_to_start_without_a_key(
    own_postgresql_url: str, keyless_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [USTUN, "worker"],
        env={**keyless_env, "USTUN_DATABASE_URL": own_postgresql_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "USTUN_SECRET_KEY is not set" in done.stderr


def test_sqlite_generates_an_owner_only_key_file(
    tmp_path: Path, keyless_env: dict[str, str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ustun.db'}"
    migrate_database(url)
    worker = subprocess.Popen(
        [USTUN, "worker"],
        env={**keyless_env, "USTUN_DATABASE_URL": url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    key_file = tmp_path / "ustun.db.key"
    try:
        wait_for(key_file.exists, what="the generated key file")
    finally:
        worker.terminate()
        worker.wait(20)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(key_file.read_text().strip()) >= 32
