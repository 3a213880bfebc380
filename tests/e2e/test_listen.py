"""`ustun listen` verifies and prints each event; forged ones are refused."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from support import UstunProcess, free_port, wait_for
from ustun import cli
from ustun.http.signature import Secret, SigningKey, headers


def _listening(
    tmp_path: Path, args: list[str], env: dict[str, str], stdin: bytes | None = None
) -> tuple[UstunProcess, str]:
    """`ustun listen <args>` on a free port, once it accepts connections; and its URL."""
    port = free_port()
    proc = UstunProcess(
        ["listen", *args, "--port", str(port)],
        {"COLUMNS": "200", **env},
        tmp_path / "listen.log",
        stdin=stdin,
    ).start()
    url = f"http://127.0.0.1:{port}/anything"

    def up() -> bool:
        assert proc.alive(), proc.output()
        try:
            httpx.get(url, timeout=1)
            return True
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, what="ustun listen to accept connections")
    except BaseException:
        proc.stop()
        raise
    return proc, url


def _accepts_only(secret: Secret, url: str) -> None:
    body = json.dumps({"id": "evt_1", "type": "payment.created", "data": {"amount": 4242}}).encode()
    good = httpx.post(url, content=body, headers=headers([secret], "evt_1", body))
    assert good.status_code == 204
    forged = httpx.post(url, content=body, headers=headers([Secret.generate()], "evt_2", body))
    assert forged.status_code == 401


def test_listen_prints_verified_events(tmp_path: Path) -> None:
    secret = Secret.generate()
    proc, url = _listening(tmp_path, ["--secret", str(secret)], {})
    try:
        _accepts_only(secret, url)
        wait_for(lambda: "4242" in proc.output(), what="the event to be printed")
        assert "payment.created" in proc.output()
    finally:
        proc.stop()


def test_listen_verifies_an_ed25519_endpoint_with_its_public_key(tmp_path: Path) -> None:
    key = SigningKey.generate()
    proc, url = _listening(tmp_path, ["--secret", str(key.public_key)], {})
    try:
        body = json.dumps({"id": "evt_1", "type": "ping", "data": {"n": 4343}}).encode()
        good = httpx.post(url, content=body, headers=headers([key], "evt_1", body))
        assert good.status_code == 204
        other = SigningKey.generate()
        forged = httpx.post(url, content=body, headers=headers([other], "evt_2", body))
        assert forged.status_code == 401
        wait_for(lambda: "4343" in proc.output(), what="the event to be printed")
    finally:
        proc.stop()


@pytest.mark.parametrize("source", ["environment", "stdin"])
def test_the_secret_can_stay_out_of_the_process_list(tmp_path: Path, source: str) -> None:
    secret = Secret.generate()
    if source == "environment":
        proc, url = _listening(tmp_path, [], {"USTUN_LISTEN_SECRET": str(secret)})
    else:
        proc, url = _listening(tmp_path, ["--secret", "-"], {}, stdin=f"{secret}\n".encode())
    try:
        assert proc.proc is not None
        command_line = Path(f"/proc/{proc.proc.pid}/cmdline").read_bytes()
        assert str(secret).encode() not in command_line
        assert b"whsec_" not in command_line
        _accepts_only(secret, url)
    finally:
        proc.stop()


def test_without_a_secret_listen_says_where_to_put_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("USTUN_LISTEN_SECRET", raising=False)
    refused = CliRunner().invoke(cli.app, ["listen"])
    assert refused.exit_code == 2
    assert "USTUN_LISTEN_SECRET" in refused.output
    assert "--secret -" in refused.output
    empty = CliRunner().invoke(cli.app, ["listen", "--secret", "-"], input="\n")
    assert empty.exit_code == 2
    assert "USTUN_LISTEN_SECRET" in CliRunner().invoke(cli.app, ["listen", "--help"]).output
