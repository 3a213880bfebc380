"""The example Litestar shop (examples/litestar_shop) as a user runs it: `python shop.py` and
`litestar --app shop:app …` commands, and uvicorn serving it (tests/litestar/conftest.py makes
one per database)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import httpx

from example_shops import BIN, Processes, Served
from support import free_port, wait_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "litestar_shop"


@dataclass
class Shop(Processes):
    """The example shop's database (`database_url` as ustun names it) and environment."""

    database_url: str
    env: dict[str, str]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cwd: ClassVar[Path] = EXAMPLE

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`args` to their end in the example's folder, on this database."""
        return subprocess.run(
            list(args),
            cwd=EXAMPLE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    def litestar(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`litestar --app shop:app <args>`."""
        return self.run(str(BIN / "litestar"), "--app", "shop:app", *args)

    def create_tables(self) -> None:
        """`python shop.py`: the shop's own tables."""
        self.run(sys.executable, "shop.py")

    def serve(self, *, workers: int) -> Served:
        """uvicorn serving the shop with `workers` processes; returns once it answers."""
        port = free_port()
        log = f"uvicorn-{port}.log"
        proc = self.start(
            str(BIN / "uvicorn"),
            "shop:app",
            "--port",
            str(port),
            "--workers",
            str(workers),
            log=log,
        )
        served = Served(f"http://127.0.0.1:{port}", proc, timeout=30)
        self.wait_listening(proc, served.url, self.log_dir / log)
        return served

    def start_worker(self) -> subprocess.Popen[bytes]:
        """`litestar --app shop:app ustun worker`: the shop's jobs and webhook deliveries."""
        return self.start(
            str(BIN / "litestar"), "--app", "shop:app", "ustun", "worker", log="worker.log"
        )

    def wait_listening(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        """Until the uvicorn `proc` logs that it runs at `url` (not some other process that
        took the port meanwhile) and answers there (401: no one signed in)."""

        def answering() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"uvicorn exited early:\n{self.logs()}")
            if f"Uvicorn running on {url}" not in log.read_text():
                return False
            try:
                return httpx.get(f"{url}/payments/0", timeout=1).status_code == 401
            except httpx.HTTPError:
                return False

        wait_for(answering, timeout=30, what=f"uvicorn to answer at {url}")
