"""What the retry policy costs on the happy path: `ustun.client.Client` vs a plain `httpx.Client`.

Both talk to the same local uvicorn server (a separate process answering 200 at once), in
alternating rounds, so machine noise hits both alike. Run: `.venv/bin/python
benchmarks/client_overhead.py`.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import httpx

from ustun.client import Client
from ustun.client._retry import Attempts, add_idempotency_key
from ustun.http.backoff import Backoff

ROUNDS = 11
REQUESTS = 300
SERVER = """
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"ok":true}'})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def per_request(call: Callable[[], httpx.Response]) -> float:
    """Microseconds per call over one round."""
    started = time.perf_counter()
    for _ in range(REQUESTS):
        call()
    return (time.perf_counter() - started) / REQUESTS * 1e6


def policy_alone() -> float:
    """Microseconds the policy's bookkeeping takes per POST (key, attempts, decision), no I/O."""
    request = httpx.Request("POST", "http://api.example/v1/payments", json={"amount": 1})
    add_idempotency_key(request)
    response, backoff, runs = httpx.Response(201, request=request), Backoff(), 20_000
    started = time.perf_counter()
    for _ in range(runs):
        del request.headers["idempotency-key"]
        add_idempotency_key(request)
        Attempts(request, backoff).after_response(response)
    return (time.perf_counter() - started) / runs * 1e6


def main() -> None:
    print(f"policy bookkeeping alone: {policy_alone():.1f} µs per POST")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        while not _up(base):
            if server.poll() is not None:
                raise SystemExit("the benchmark server did not start")
            time.sleep(0.05)
        with httpx.Client(base_url=base) as plain, Client(base_url=base) as safe:
            cases = {
                "GET": (lambda: plain.get("/"), lambda: safe.get("/")),
                "POST": (
                    lambda: plain.post("/", json={"amount": 1}),
                    lambda: safe.post("/", json={"amount": 1}),  # + Idempotency-Key
                ),
            }
            for method, (httpx_call, ustun_call) in cases.items():
                times: dict[str, list[float]] = {"httpx": [], "ustun": []}
                for _ in range(ROUNDS):
                    times["httpx"].append(per_request(httpx_call))
                    times["ustun"].append(per_request(ustun_call))
                plain_us, safe_us = (statistics.median(times[k]) for k in ("httpx", "ustun"))
                print(
                    f"{method}: httpx.Client {plain_us:.0f} µs/request, ustun Client "
                    f"{safe_us:.0f} µs/request, ratio {safe_us / plain_us:.2f}"
                )
    finally:
        server.terminate()
        server.wait(10)


def _up(base: str) -> bool:
    try:
        return httpx.get(base).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
