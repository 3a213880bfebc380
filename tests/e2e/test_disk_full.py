"""SQLite on a 40 MB volume filled by 500 kB documents: each refused write is a 507
`insufficient-storage` with Retry-After on a connection that stays open, nothing answered 201 is
lost, the database stays intact, small writes and /healthz still work, and /healthz and /metrics
say the disk is full."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import os
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import FIRST_KEY, Server, wait_for

pytestmark = pytest.mark.e2e

DOCUMENTS = 120
DOCUMENT_CHARS = 500_000
CONCURRENCY = 8


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A 40 MB tmpfs of this test's own (needs root, as the test machine gives)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(volume)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a 40 MB tmpfs (run as root): {mounted.stderr.strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=True)


async def test_a_full_disk_is_a_507_and_loses_nothing(small_volume: Path, tmp_path: Path) -> None:
    database = small_volume / "ustun.db"
    server = Server(f"sqlite:///{database}", tmp_path / "serve.log").start()
    try:
        api_key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the key").group()
        limits = httpx.Limits(max_connections=CONCURRENCY)
        async with httpx.AsyncClient(
            base_url=server.base_url,
            headers={"authorization": f"Bearer {api_key}"},
            timeout=60,
            limits=limits,
        ) as http:
            answers: list[httpx.Response] = []
            sent: dict[str, str] = {}  # idempotency key → sha256 of the body sent
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(n: int) -> None:
                body = os.urandom(DOCUMENT_CHARS // 2).hex()
                key = str(uuid.uuid4())
                sent[key] = hashlib.sha256(body.encode()).hexdigest()
                async with gate:
                    answers.append(
                        await http.post(
                            "/v1/documents",
                            json={"title": f"doc {n}", "body": body},
                            headers={"idempotency-key": key},
                        )
                    )

            # A connection reset or a dropped answer raises here (httpx.TransportError).
            await asyncio.gather(*(one(n) for n in range(DOCUMENTS)))

            statuses = collections.Counter(r.status_code for r in answers)
            assert set(statuses) <= {201, 507}, statuses
            assert statuses[507], f"the volume never filled: {statuses}"
            for refused in (r for r in answers if r.status_code == 507):
                assert refused.headers["retry-after"] == "60"
                assert refused.json()["type"].endswith("/problems/insufficient-storage")
                assert refused.json()["storage"] == "database"

            # Every document answered 201 is there, whole.
            for created in (r for r in answers if r.status_code == 201):
                key = created.request.headers["idempotency-key"]
                read = await http.get(created.headers["location"])
                assert read.status_code == 200
                assert hashlib.sha256(read.json()["body"].encode()).hexdigest() == sent[key]

            small = await http.post(
                "/v1/payments",
                json={"amount": 100, "currency": "EUR"},
                headers={"idempotency-key": str(uuid.uuid4())},
            )
            assert small.status_code == 201, small.text

            health = await http.get("/healthz")
            assert health.status_code == 200
            assert health.json()["status"] == "degraded"
            assert health.json()["storage"]["status"] == "full"
            metrics = (await http.get("/metrics")).text
            assert "ustun_storage_full 1.0" in metrics
            refusals = f'ustun_database_refusals_total{{outage="full"}} {statuses[507]}.0'
            assert refusals in metrics

        with contextlib.closing(sqlite3.connect(database)) as check:
            assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert "unhandled error" not in server.output()
    finally:
        server.stop()
