"""A PostgreSQL cluster of a test's own (initdb, pg_ctl), for what the shared server must not
undergo: a restart under load. Its files live in a directory of their own under the system's
temporary directory (pytest's are closed to the postgres user the server runs as)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from support import free_port

# Debian's layout: /usr/lib/postgresql/<major>/bin; the newest major installed.
_BIN = max(
    Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), default=None
)


class Cluster:
    """A cluster on a free port of 127.0.0.1, trusting local connections."""

    def __init__(self) -> None:
        if _BIN is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin = _BIN
        self.root = Path(tempfile.mkdtemp(prefix="ustun-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/ustun"

    def _run(self, program: str, *args: str) -> None:
        # The server refuses to run as root: as root, run it as the postgres user.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run(
            [*prefix, str(self.bin / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stderr or done.stdout}")

    def _pg_ctl(self, *args: str) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
            " -c fsync=off -c max_connections=200"
        )
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-o", options, *args)

    def start(self) -> Cluster:
        """initdb, start, and create the database `ustun`."""
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self._pg_ctl("start", "-w")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "ustun")
        return self

    def restart(self) -> None:
        """Fast shutdown (every session is ended at once), then start again; returns once up."""
        self._pg_ctl("restart", "-m", "fast", "-w")

    def stop(self) -> None:
        """Stop at once and remove its files."""
        try:
            self._pg_ctl("stop", "-m", "immediate", "-w")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
