"""What the example shops' tests share (tests/django, tests/flask, tests/litestar): the shop's
processes, each started in the example's folder in a session of its own, the race of duplicate
payments with its check, and the README's blocks with the check of each commented request."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ustun.http.sse_parser import EventStreamParser

BIN = Path(sys.executable).parent
SECRET_KEY = "test-shop-secret-key-of-at-least-32-characters"
USERS = {"ann": "ann-password", "bob": "bob-password"}
# A README's shell blocks, and a request line's `# <status> [header: value | body text]`.
SH = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)
EXPECTED = re.compile(r"^(?P<command>.*?)  # (?P<status>\d{3})(?: (?P<shown>.+))?$")


class Processes:
    """Long-running processes of one test module (servers, workers): started in `cwd` with
    `env`, their output in `log_dir`, all stopped by `stop_all`."""

    cwd: Path
    env: dict[str, str]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]]

    def start(self, *args: str, log: str, **env: str) -> subprocess.Popen[bytes]:
        """`args` with `env` added to the environment, its output in `log_dir/<log>`."""
        out = (self.log_dir / log).open("ab")
        proc = subprocess.Popen(
            list(args),
            cwd=self.cwd,
            env={**self.env, **env},
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        self.processes.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL to `proc` and every process it started (gunicorn's workers): no cleanup."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.log_dir.glob("*.log"))

    def stop_all(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@dataclass(frozen=True)
class Served:
    """A shop's server, answering at `url`; its clients wait `timeout` seconds for an answer."""

    url: str
    process: subprocess.Popen[bytes]
    timeout: float

    def client(self, user: str = "ann") -> httpx.Client:
        """An HTTP client signed in as `user` (basic auth)."""
        return httpx.Client(base_url=self.url, auth=(user, USERS[user]), timeout=self.timeout)


def race(
    client: Callable[[], httpx.Client], n: int, path: str, key: str, amount: int
) -> list[httpx.Response]:
    """`n` POSTs of one payment under one key, sent together, each on its own connection."""
    start = threading.Barrier(n)

    def post(_: int) -> httpx.Response:
        with client() as http:
            start.wait()
            return http.post(
                path, json={"amount": amount, "currency": "EUR"}, headers={"Idempotency-Key": key}
            )

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(post, range(n)))


def executed_once(answers: list[httpx.Response]) -> httpx.Response:
    """The one answer that ran the view; every other is its replay, or a 409 in progress
    (PostgreSQL answers a duplicate so while the key is held; SQLite queues it for the write
    lock, and it finds the stored answer)."""
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {201, 409}, statuses
    fresh = [a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers]
    assert len(fresh) == 1, statuses
    for answer in answers:
        if answer.status_code == 409:
            assert answer.json()["type"] == "/problems/idempotency-in-progress"
            assert "retry-after" in answer.headers
        else:
            assert answer.content == fresh[0].content
    return fresh[0]


def readme_blocks(readme: Path) -> tuple[str, str, list[str]]:
    """An example README's shell blocks: set-up, serving, and the request lines of the rest."""
    setup, serve, *requests = SH.findall(readme.read_text())
    return setup, serve, [line for block in requests for line in block.splitlines()]


def answers_as_commented(line: str, address: str, logs: Callable[[], str]) -> None:
    """Run a README request line's curl against `address` (for the README's `localhost:8000`)
    and check its answer against the line's comment: the status, then a header the answer
    carries (`name: value`) or a text of its body (any other text, or a quoted one)."""
    expected = EXPECTED.match(line)
    assert expected is not None, f"no `# <status>` comment: {line}"
    command = expected["command"].replace("localhost:8000", address)
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True
    )
    head, _, body = done.stdout.replace("\r\n", "\n").partition("\n\n")
    status = head.split("\n", 1)[0].split()[1]
    assert status == expected["status"], f"{line}\n{done.stdout}\n{logs()}"
    shown = expected["shown"]
    if shown is not None and ": " in shown and not shown.startswith('"'):
        name, value = shown.split(": ", 1)
        assert f"\n{name.lower()}: {value}" in head.lower(), f"{line}\n{done.stdout}"
    elif shown is not None:
        assert shown in body, f"{line}\n{done.stdout}\n{logs()}"


def stream_events(response: httpx.Response) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(id, type, data) of each server-sent event of an open job stream, as they arrive."""
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    parser = EventStreamParser()
    for chunk in response.iter_bytes():
        for event in parser.feed(chunk):
            yield int(event.id), event.event, json.loads(event.data)


def stream_ids(client: httpx.Client, job_url: str, last: int | None = None) -> list[int]:
    """The ids of a job's whole event stream after `last` (it ends at the job's final state)."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    with client.stream("GET", f"{job_url}/events", headers=headers) as response:
        return [event_id for event_id, _, _ in stream_events(response)]
