"""What the web framework benchmarks (django.py, frameworks.py) share.

The load generator, run in a process of its own that imports nothing heavy (`python
framework_bench.py load URL SECONDS CONNECTIONS [keep-alive]`): asyncio clients POSTing `BODY`,
each request with a fresh Idempotency-Key, one connection per request (as gunicorn's sync
workers answer) or, with `keep-alive`, one persistent connection per client (as uvicorn
answers). Then a server's start awaited, the CPU a load costs a server's processes and the
database's PostgreSQL backends (Linux /proc), and py-spy profiles split by layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BIN = Path(sys.executable).parent
BODY = b'{"amount":1250,"currency":"EUR"}'
STARTUP = 120.0  # seconds a server may take to answer, on a loaded machine
PROFILE_RATE = 250  # py-spy samples/s
# (layer, file-path fragments): `split` files a sample under the first layer, innermost frame
# first, that one of its frames' paths matches.
Layers = Sequence[tuple[str, Sequence[str]]]


# --- the load generator, in a process of its own ---------------------------------------------


async def _load(
    url: str, seconds: float, connections: int, run: str, keep_alive: bool
) -> dict[str, Any]:
    """`connections` clients POSTing to `url` for `seconds`, a fresh Idempotency-Key each;
    count answers by status."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\nIdempotency-Key: "
    ).encode()
    tail = b"\r\n\r\n" + BODY
    statuses: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def client(n: int) -> None:
        sent = 0
        while loop.time() < deadline:
            sent += 1
            try:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(head + f"{run}-{n}-{sent}".encode() + tail)
                answer = await reader.read()
                writer.close()
                statuses[answer[9:12].decode() or "empty"] += 1
            except OSError as error:
                statuses[type(error).__name__] += 1

    async def kept_client(n: int) -> None:
        sent = 0
        while loop.time() < deadline:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                while loop.time() < deadline:
                    sent += 1
                    writer.write(head + f"{run}-{n}-{sent}".encode() + tail)
                    answer = await reader.readuntil(b"\r\n\r\n")
                    statuses[answer[9:12].decode()] += 1
                    await reader.readexactly(_content_length(answer))
                writer.close()
            except (OSError, asyncio.IncompleteReadError) as error:
                statuses[type(error).__name__] += 1

    began = loop.time()
    await asyncio.gather(*((kept_client if keep_alive else client)(n) for n in range(connections)))
    return {"seconds": loop.time() - began, "statuses": dict(statuses)}


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise OSError("an answer without Content-Length on a kept-alive connection")


def load_main(argv: list[str]) -> None:
    """The load process: `URL SECONDS CONNECTIONS [keep-alive]`; prints its result as JSON."""
    try:
        from uvloop import run as run_loop
    except ImportError:
        run_loop = asyncio.run  # type: ignore[assignment]
    url, seconds, connections = argv[0], float(argv[1]), int(argv[2])
    keep_alive = argv[3:] == ["keep-alive"]
    print(json.dumps(run_loop(_load(url, seconds, connections, uuid.uuid4().hex, keep_alive))))


def load_command(url: str, seconds: float, connections: int, keep_alive: bool) -> list[str]:
    """The command line of a load process."""
    return [
        *(sys.executable, __file__, "load", url, str(seconds), str(connections)),
        *(["keep-alive"] if keep_alive else []),
    ]


# --- servers and measures --------------------------------------------------------------------


def wait_up(proc: subprocess.Popen[bytes], url: str, name: str, log: Path) -> None:
    """Until `url` answers a GET with 405 (up: POST only); `name` and its `log` if it exits or
    does not answer within STARTUP seconds."""
    import httpx  # here: the load process starts without it

    deadline = time.monotonic() + STARTUP
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 405:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} did not answer in {STARTUP:g} s")
        time.sleep(0.2)


def process_tree(master: int) -> list[int]:
    """A server's master and its workers, the master's children (Linux /proc)."""
    pids = [master]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The fields after the command's closing parenthesis: state, ppid, ...
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == master:
                pids.append(int(stat.parent.name))
    return pids


@dataclass(frozen=True)
class Measure:
    """One load of a server: its answers, how long it ran, and the CPU seconds it cost the
    server's processes and the database's PostgreSQL backends."""

    statuses: dict[str, int]
    seconds: float
    server_cpu: float
    postgresql_cpu: float


def measure(
    master: int,
    database: str | None,
    url: str,
    seconds: float,
    connections: int,
    *,
    keep_alive: bool,
) -> Measure:
    """Load `url` for `seconds` and measure the CPU it cost the process tree of `master` and
    the PostgreSQL backends of `database` (None: SQLite, none)."""
    from jobs import backend_cpu, processes_cpu  # here: the load process starts without ustun

    pids = process_tree(master)
    backends = asyncio.run(backend_cpu(database))
    cpu = processes_cpu(pids)
    out = subprocess.run(
        load_command(url, seconds, connections, keep_alive),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    server = sum(s - cpu.get(pid, 0.0) for pid, s in processes_cpu(pids).items())
    postgresql = sum(
        s - backends.get(pid, 0.0) for pid, s in asyncio.run(backend_cpu(database)).items()
    )
    result = json.loads(out)
    return Measure(result["statuses"], result["seconds"], server, postgresql)


# --- profiles -------------------------------------------------------------------------------


def split(profile: Path, layers: Layers) -> Counter[str]:
    """Samples of `profile` (py-spy raw: `frame;frame;... count`) per layer of `layers`."""
    found: Counter[str] = Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        layer = "other"
        for frame in reversed(frames):
            path = frame.rsplit("(", 1)[-1]
            match = next((name for name, parts in layers if any(p in path for p in parts)), None)
            if match is not None:
                layer = match
                break
        found[layer] += int(count)
    return found


def py_spy(
    master: int,
    url: str,
    seconds: float,
    connections: int,
    out: Path,
    layers: Layers,
    *,
    keep_alive: bool,
    gil: bool = True,
) -> dict[str, float]:
    """One more load of `url` while py-spy samples the process tree of `master` into `out`:
    µs per request of each layer (and of "other"). `gil`: only the threads holding the GIL
    (Python's own CPU), else every thread not idle (the C code that releases the GIL too)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    command = load_command(url, seconds + 2, connections, keep_alive)
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as load:
        time.sleep(1)  # the steady state, not the start
        subprocess.run(
            [
                *(str(BIN / "py-spy"), "record", "--nonblocking", "--subprocesses"),
                *(["--gil"] if gil else []),
                *("--pid", str(master), "--duration", str(int(seconds))),
                *("--rate", str(PROFILE_RATE), "--format", "raw", "--output", str(out)),
            ],
            check=True,
            capture_output=True,
        )
        result = json.loads(load.communicate()[0])
    if load.returncode != 0:
        raise SystemExit(f"the load failed while profiling {url}")
    requests = sum(result["statuses"].values()) / result["seconds"] * int(seconds)
    us_per_sample = 1e6 / PROFILE_RATE / requests
    samples = split(out, layers)
    return {name: samples[name] * us_per_sample for name in [*(n for n, _ in layers), "other"]}


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


if __name__ == "__main__" and sys.argv[1:2] == ["load"]:
    load_main(sys.argv[2:])
