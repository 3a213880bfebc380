"""A CPU-bound job step for tests, importable in the runner's worker process, and helpers to
watch the processes that run it.

`spin` burns CPU (pure Python, holding the GIL as a PDF rendering does) and appends
`start`/`end` lines with its pid to a log (O_APPEND, one write per line), so a test sees every
run of a step and which process ran it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _log(path: str, what: str, job_id: str, attempt: int) -> None:
    line = f"{what} {job_id} {os.getpid()} {attempt}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def spin(log: str, job_id: str, attempt: int, seconds: float) -> bytes:
    """Compute for `seconds`; the result names the attempt."""
    _log(log, "start", job_id, attempt)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(1_000))
    _log(log, "end", job_id, attempt)
    return f"attempt {attempt}".encode()


def steps(log: Path) -> list[tuple[str, int, int]]:
    """`(what, pid, attempt)` for every line `spin` wrote to `log`."""
    if not log.exists():
        return []
    return [
        (what, int(pid), int(attempt))
        for what, _, pid, attempt in (line.split() for line in log.read_text().splitlines())
    ]


def gone(pid: int) -> bool:
    """Whether the process `pid` has ended (exited, or killed and not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
