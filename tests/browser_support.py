"""Helpers of the browser tests (tests/e2e/test_*_browser.py): `ustun serve` on a backend of
the test's own, keys made with the CLI, a webhook receiver that fails until told to accept, the
viewports and where screenshots go."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

from playwright.sync_api import Page

from support import FIRST_KEY, USTUN, Server, drop_pg_database, make_pg_database, wait_for

T = TypeVar("T")
SCREENSHOTS = Path(__file__).parents[1] / "docs" / "screenshots"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
# For a server whose only retry is an hour away: a failed delivery is sent again only by the
# page's Retry button. Its circuit breaker is off: the pages are shown endpoints with more failed
# deliveries than the breaker lets through before it holds the rest back.
RETRY_BY_HAND = {
    "USTUN_WEBHOOK_RETRY_SCHEDULE": "3600",
    "USTUN_WEBHOOK_TIMEOUT": "5",
    "USTUN_WEBHOOK_CIRCUIT_FAILURES": "0",
}


def off_loop(work: Callable[[], T]) -> T:
    """Run `work` (which runs its own asyncio loop) outside Playwright's running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result()


@contextmanager
def served(backend: str, tmp: Path, *args: str, **env: str) -> Iterator[tuple[Server, str, str]]:
    """`ustun serve *args` on a new database of `backend` (private webhook addresses allowed,
    `env` added) until the `with` ends: the server, its database URL and the first key."""
    if backend == "sqlite":
        name, url = None, f"sqlite:///{tmp / 'ustun.db'}"
    else:
        name, url = off_loop(make_pg_database)
    server = Server(url, tmp / "serve.log", *args, USTUN_WEBHOOK_ALLOW_PRIVATE="1", **env).start()
    try:
        key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the first API key")
        yield server, url, key.group()
    finally:
        server.stop()
        if name is not None:
            off_loop(lambda: drop_pg_database(name))


def new_key(database_url: str, *args: str) -> str:
    """A key made with `ustun keys create *args` (`--account NAME`, `--operator`)."""
    done = subprocess.run(
        [USTUN, "keys", "create", *args],
        env={**os.environ, "USTUN_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


class Receiver:
    """A local webhook receiver that answers 500 until told to accept (then 204); `received`
    holds the bodies."""

    def __init__(self) -> None:
        self.accepting = False
        self.received: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.received.append(self.rfile.read(int(self.headers["content-length"])))
                if receiver.accepting:
                    self.send_response(204)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = b"not yet, sorry"
                self.send_response(500)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hook"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A `Receiver` until the `with` ends."""
    running = Receiver()
    try:
        yield running
    finally:
        running.http.shutdown()
        running.http.server_close()


def csp_violations(page: Page) -> list[str]:
    """Collect what the page's Content-Security-Policy refuses (Chromium logs each refusal)."""
    refused: list[str] = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return refused
