"""What `ustun serve` takes from one connection: a bounded head, in bounded time, and a bounded
body time; raw sockets against a real server (the limits live in the HTTP protocol, before any
storage, so one backend is enough)."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from support import FIRST_KEY, Server, wait_for

# Its timeouts are a second or two, and its checks time them: alone, on a machine not running
# the rest of the suite (a loaded one once kept a pipelined pair from arriving in time).
pytestmark = [pytest.mark.e2e, pytest.mark.alone]

HEADER_TIMEOUT = 1.5
BODY_TIMEOUT = 1.5
KEEP_ALIVE_TIMEOUT = 1
# How late a timed-out connection may be closed on a busy machine.
SLACK = 2.0
MAX_HEADER_BYTES = 65_536  # the defaults, not shortened
MAX_HEADERS = 100
MIB = 1_048_576


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `ustun serve` with short timeouts and the default size limits."""
    tmp = tmp_path_factory.mktemp("limits")
    served = Server(
        f"sqlite:///{tmp / 'ustun.db'}",
        tmp / "serve.log",
        "--no-worker",
        USTUN_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        USTUN_BODY_TIMEOUT=str(BODY_TIMEOUT),
        USTUN_KEEP_ALIVE_TIMEOUT=str(KEEP_ALIVE_TIMEOUT),
    ).start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def key(server: Server) -> str:
    return str(wait_for(lambda: FIRST_KEY.search(server.output()), what="the first API key")[0])


def _connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _head(*fields: str, target: str = "/healthz", method: str = "GET") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "host: 127.0.0.1", *fields, "", ""]
    return "\r\n".join(lines).encode()


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-cased names) and its content-length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65_536)
        assert chunk, f"closed before a whole response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65_536)
        assert chunk, "closed in the middle of a body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def _seconds_until_closed(
    sock: socket.socket, *, trickle: bytes = b"", every: float = 0.2, within: float = 15
) -> float:
    """Seconds until the server closes `sock` having sent nothing, `trickle` sent `every` s."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        if select.select([sock], [], [], every)[0]:
            try:
                got = sock.recv(65_536)
            except ConnectionResetError:
                got = b""
            assert got == b"", f"the server answered instead of closing: {got!r}"
            return time.monotonic() - start
        if trickle:
            try:
                sock.sendall(trickle)
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
    raise AssertionError(f"the connection was still open after {within} s")


def _vm_rss(server: Server) -> int:
    """The server process's resident memory, in bytes (Linux)."""
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_normal_requests_pass_at_the_limits(server: Server, key: str) -> None:
    auth = {"authorization": f"Bearer {key}"}
    # A body of many reads (padded with JSON whitespace to near USTUN_MAX_BODY).
    body = b'{"amount": 100, "currency": "EUR"}'.ljust(1_000_000)
    made = httpx.post(
        f"{server.base_url}/v1/payments",
        headers={**auth, "idempotency-key": "limits-1", "content-type": "application/json"},
        content=body,
    )
    assert made.status_code == 201, made.text

    # Exactly as many fields as allowed (host is one), the head just under the byte limit.
    fields = [f"x-field-{n}: v" for n in range(MAX_HEADERS - 2)]
    head = _head(*fields, "x-padding: ")
    padding = "p" * (MAX_HEADER_BYTES - len(head) - 64)
    big = _head(*fields, f"x-padding: {padding}")
    with _connect(server) as sock:
        sock.sendall(big)
        assert _read_response(sock)[0] == 200
        sock.sendall(big + big)  # then two at once (pipelined) on the kept-alive connection
        assert [_read_response(sock)[0] for _ in range(2)] == [200, 200]


@pytest.mark.parametrize("finished", [True, False], ids=["whole", "unfinished"])
def test_a_head_over_the_byte_limit_gets_431(server: Server, finished: bool) -> None:
    head = _head(f"x-big: {'a' * (MAX_HEADER_BYTES + 1024)}")
    with _connect(server) as sock:
        sock.sendall(head if finished else head[:-4])
        status, headers, body = _read_response(sock)
        assert status == 431
        assert headers["content-type"] == "application/problem+json"
        assert headers["connection"] == "close"
        assert json.loads(body)["type"].endswith("/problems/headers-too-large")
        assert _seconds_until_closed(sock, within=5) < 5


def test_too_many_header_fields_get_431(server: Server) -> None:
    with _connect(server) as sock:
        sock.sendall(_head(*(f"x-field-{n}: v" for n in range(MAX_HEADERS))))
        status, _, body = _read_response(sock)
        assert status == 431, body
        assert json.loads(body)["type"].endswith("/problems/headers-too-large")


def _flood(server: Server, sockets: list[socket.socket]) -> int:
    """Send a head that never ends, up to 50 MB; return how much the server took."""
    sock = _connect(server)
    sockets.append(sock)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-flood: ")
    chunk, sent = b"a" * 65_536, 0
    try:
        while sent < 50 * MIB:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_a_header_flood_is_cut_off_and_memory_stays_flat(server: Server) -> None:
    before = _vm_rss(server)
    sockets: list[socket.socket] = []
    try:
        with ThreadPoolExecutor(4) as pool:
            sent = list(pool.map(lambda _: _flood(server, sockets), range(4)))
        grown = _vm_rss(server) - before
    finally:
        for sock in sockets:
            sock.close()
    # What the kernel's socket buffers take in before the reset is seen, and no more.
    assert max(sent) < 16 * MIB, sent
    assert grown < 20 * MIB, f"the server grew by {grown / MIB:.1f} MiB"
    assert httpx.get(f"{server.base_url}/healthz").status_code == 200


@pytest.mark.parametrize("trickle", [b"", b"x-slow: 1\r\n"], ids=["silent", "trickling"])
def test_a_slow_head_is_closed_within_the_header_timeout(server: Server, trickle: bytes) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" if trickle else b"")
        waited = _seconds_until_closed(sock, trickle=trickle)
    assert HEADER_TIMEOUT - 0.2 < waited < HEADER_TIMEOUT + SLACK


def test_a_slow_head_on_a_kept_alive_connection_is_closed_too(server: Server) -> None:
    with _connect(server) as sock:
        sock.sendall(_head())
        assert _read_response(sock)[0] == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        waited = _seconds_until_closed(sock, trickle=b"x-slow: 1\r\n")
    assert HEADER_TIMEOUT - 0.2 < waited < HEADER_TIMEOUT + SLACK


@pytest.mark.parametrize("trickle", [b"", b" "], ids=["stalled", "trickling"])
def test_a_slow_body_is_closed_within_the_body_timeout(
    server: Server, key: str, trickle: bytes
) -> None:
    head = _head(
        f"authorization: Bearer {key}",
        "idempotency-key: limits-slow-body",
        "content-type: application/json",
        "content-length: 1000",
        target="/v1/payments",
        method="POST",
    )
    with _connect(server) as sock:
        sock.sendall(head + b'{"amount": 100, ')
        waited = _seconds_until_closed(sock, trickle=trickle)
    assert BODY_TIMEOUT - 0.2 < waited < BODY_TIMEOUT + SLACK


def test_an_idle_kept_alive_connection_is_closed(server: Server) -> None:
    with _connect(server) as sock:
        sock.sendall(_head())
        assert _read_response(sock)[0] == 200
        waited = _seconds_until_closed(sock)
    assert KEEP_ALIVE_TIMEOUT - 0.2 < waited < KEEP_ALIVE_TIMEOUT + SLACK
