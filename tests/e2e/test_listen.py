"""`ustun listen` verifies and prints each event; forged ones are refused."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from support import UstunProcess, free_port, wait_for
from ustun.http.signature import Secret, headers


def test_listen_prints_verified_events(tmp_path: Path) -> None:
    secret = Secret.generate()
    port = free_port()
    proc = UstunProcess(
        ["listen", "--secret", str(secret), "--port", str(port)],
        {"COLUMNS": "200"},
        tmp_path / "listen.log",
    ).start()
    url = f"http://127.0.0.1:{port}/anything"
    try:

        def up() -> bool:
            assert proc.alive(), proc.output()
            try:
                httpx.get(url, timeout=1)
                return True
            except httpx.HTTPError:
                return False

        wait_for(up, what="ustun listen to accept connections")
        body = json.dumps(
            {"id": "evt_1", "type": "payment.created", "data": {"amount": 4242}}
        ).encode()
        good = httpx.post(url, content=body, headers=headers([secret], "evt_1", body))
        assert good.status_code == 204
        forged = httpx.post(url, content=body, headers=headers([Secret.generate()], "evt_2", body))
        assert forged.status_code == 401
        wait_for(lambda: "4242" in proc.output(), what="the event to be printed")
        assert "payment.created" in proc.output()
    finally:
        proc.stop()
