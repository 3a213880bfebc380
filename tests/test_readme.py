"""Every code block of README.md runs as written, so the README cannot drift from the code.

One `ustun serve` on a fresh SQLite database plays the reader's server. ```sh blocks run
command by command in bash, with `$KEY` set as the README says: each curl's status is checked
against the comment that starts with one (`# 201 …`), and against the body a comment that is
exact JSON. A `ustun …` synopsis line (with `[…]` or `<…>`) is checked against its `--help`.
A placeholder id (`pay_…`) or ETag (`"1.…"`) stands for the one an earlier answer showed.
```python blocks run as complete programs (tests/doc_programs.py: a `print(…)  # → text` line
must print `text`); a block that defines `app` is served by uvicorn and exercised with the
requests below. Blocks run in README order and share one directory.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from doc_programs import Block as Program
from doc_programs import run_program
from support import FIRST_KEY, USTUN, Server, free_port, wait_for
from ustun import cli

pytestmark = pytest.mark.e2e

README = Path(__file__).parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
# Languages of blocks that are shown, not run.
SHOWN_ONLY = {"json": "a payload or a log line, compared by nobody"}
README_ADDRESS = "127.0.0.1:8000"
IDS = re.compile(r"\b(pay|la|tr|doc|job|we|evt|dlv|key)_[A-Za-z0-9]+")
# What the ids in the event catalogue's examples (`GET /v1/event-types`) contain.
EXAMPLE_ID = "EXAMPLE"
PLACEHOLDER = re.compile(r"\b(pay|la|tr|doc|job|we|evt|dlv|key)_…")
ETAG_PLACEHOLDER = re.compile(r'"\d*\.?…"')
COMMENT = re.compile(r"\s+# (.*)$")
STATUS = re.compile(r"^(\d{3})\b")
TIMEOUT = 30.0

# Shell lines the test does not run, by how they start, and why.
SKIPPED = {
    "make ": "sets up a virtualenv and installs: the test already runs inside one",
    ".venv/bin/pytest": "the test suite itself",
    "pip install": "installs a package: the dev extra already has it",
    "USTUN_LISTEN_SECRET=": "runs until stopped: tests/e2e/test_listen.py runs `ustun listen`",
    "pass show": "needs the reader's password store",
    "USTUN_DATABASE_URL=postgresql://app@db/app": "the reader's own app database",
}


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    code: str


def readme_blocks() -> list[Block]:
    text = README.read_text()
    return [
        Block(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in FENCE.finditer(text)
    ]


ALL_BLOCKS = readme_blocks()
BLOCKS = [b for b in ALL_BLOCKS if b.lang in ("sh", "python")]


@dataclass
class Reader:
    """What the reader has so far: the server, their environment, and the ids they were shown."""

    base_url: str
    address: str
    workdir: Path
    env: dict[str, str]
    ids: dict[str, list[str]] = field(default_factory=dict)
    etag: str | None = None

    def seen(self, text: str) -> None:
        for match in IDS.finditer(text):
            if EXAMPLE_ID in match.group():
                continue  # the event catalogue's examples name no real object
            shown = self.ids.setdefault(match.group(1), [])
            if match.group() not in shown:
                shown.append(match.group())

    def fill(self, command: str) -> str:
        """The command with this server's address and the ids and ETag it stands for."""
        command = command.replace(README_ADDRESS, self.address)
        wanted: dict[str, int] = {}
        for match in PLACEHOLDER.finditer(command):
            wanted[match.group(1)] = wanted.get(match.group(1), 0) + 1
        for prefix, count in wanted.items():
            shown = self.ids.get(prefix, [])
            assert len(shown) >= count, f"no {prefix}_ id shown before `{command}`"
            for value in shown[-count:]:
                command = command.replace(f"{prefix}_…", value, 1)
        if ETAG_PLACEHOLDER.search(command):
            assert self.etag is not None, f"no ETag shown before `{command}`"
            command = ETAG_PLACEHOLDER.sub(lambda _: self.etag or "", command)
        return command


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    """`ustun serve` on a fresh SQLite database, as after `make serve`, with `$KEY` set."""
    tmp = tmp_path_factory.mktemp("readme")
    server = Server(
        f"sqlite:///{tmp / 'ustun.db'}", tmp / "serve.log", USTUN_WEBHOOK_ALLOW_PRIVATE="1"
    ).start()
    try:
        key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the first API key")
        workdir = tmp / "reader"
        workdir.mkdir()
        path = f"{Path(USTUN).parent}:{os.environ['PATH']}"
        env = {**os.environ, "KEY": key.group(), "PATH": path}
        yield Reader(server.base_url, server.base_url.removeprefix("http://"), workdir, env)
    finally:
        server.stop()


def shell_commands(code: str) -> list[tuple[str, str]]:
    """(command, expectation) pairs: continuation lines joined, a comment line joins the command."""
    commands: list[tuple[str, str]] = []
    pending = ""
    for line in code.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if commands and not commands[-1][1]:
                commands[-1] = (commands[-1][0], stripped.lstrip("# "))
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        command, comment = pending, ""
        if found := COMMENT.search(command):
            command, comment = command[: found.start()], found.group(1)
        if command.strip():
            commands.append((command.strip(), comment))
        pending = ""
    return commands


def run_shell(reader: Reader, command: str, expected: str) -> None:
    command = reader.fill(command)
    if re.match(r"[A-Z]\w*=", command) and "curl" not in command:
        # Assignments: keep what they set for the commands after them.
        shown = subprocess.run(
            ["bash", "-c", f"set -a\n{command}\nenv -0"],
            env=reader.env,
            capture_output=True,
            check=True,
            timeout=TIMEOUT,
        ).stdout.decode()
        reader.env = dict(item.split("=", 1) for item in shown.split("\0") if "=" in item)
        return
    if command.startswith("ustun ") and re.search(r"\[|<|…", command):
        check_synopsis(reader, command)
        return
    headers = reader.workdir / "headers"
    headers.unlink(missing_ok=True)
    command = command.replace("curl ", f"curl -sS -D {headers} ", 1)
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        env=reader.env,
        cwd=reader.workdir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"`{command}` exited {done.returncode}: {done.stderr}"
    reader.seen(done.stdout)
    head = headers.read_text() if headers.exists() else ""
    reader.seen(head)
    if etag := re.findall(r"(?im)^etag: (.*?)\r?$", head):
        reader.etag = etag[-1]
    statuses = re.findall(r"(?m)^HTTP/[\d.]+ (\d{3})", head)
    if status := STATUS.match(expected):
        assert statuses[-1:] == [status.group(1)], (
            f"`{command}` answered {statuses} where the README says {expected!r}:\n{done.stdout}"
        )
    if (shape := json_or_none(expected)) is not None:
        assert json.loads(done.stdout) == shape, f"`{command}`: {done.stdout}"


def json_or_none(comment: str) -> object:
    """The comment as JSON when it is exactly a JSON object or array (an answer in full)."""
    if not comment.startswith(("{", "[")):
        return None
    try:
        return json.loads(comment)
    except ValueError:
        return None


def check_synopsis(reader: Reader, line: str) -> None:
    """A `ustun …` synopsis line: the command exists and takes every option it shows."""
    words = re.split(r"[\[<]", line, maxsplit=1)[0].split()
    shown = CliRunner().invoke(cli.app, [*words[1:], "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, f"`{' '.join(words)} --help`: {shown.output}"
    for option in re.findall(r"--[a-z][a-z-]*", line):
        assert option in shown.output, f"`{' '.join(words)}` has no {option}"


def skipped(command: str) -> bool:
    return any(command.startswith(start) for start in SKIPPED)


# --- apps: how to exercise each block that defines one, by a line of the block ---------------


def no_env(reader: Reader, app_url: str) -> dict[str, str]:
    return {}


def exercise_orders(reader: Reader, app_url: str, workdir: Path) -> None:
    """The idempotency middleware: a key runs the handler once, its retry is replayed."""
    headers = {"Idempotency-Key": "order-1"}
    first = httpx.post(f"{app_url}/orders", json={"item": "book", "quantity": 2}, headers=headers)
    again = httpx.post(f"{app_url}/orders", json={"item": "book", "quantity": 2}, headers=headers)
    assert first.status_code == 201, first.text
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    missing = httpx.post(f"{app_url}/orders", json={"item": "book", "quantity": 2})
    assert missing.status_code == 400
    assert missing.json()["type"] == "/problems/idempotency-key-missing"
    assert httpx.get(f"{app_url}{missing.json()['type']}").status_code == 200


def exercise_notes(reader: Reader, app_url: str, workdir: Path) -> None:
    """`install_problem_handlers`: 428 and 412 as problem+json, each `type` a page of the app."""
    url = f"{app_url}/notes/n1"
    missing = httpx.put(url, json={"text": "v1"})
    assert missing.status_code == 428, missing.text
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["type"] == "/problems/precondition-required"
    created = httpx.put(url, json={"text": "v1"}, headers={"if-none-match": "*"})
    assert (created.status_code, created.headers["etag"]) == (200, '"1"')
    taken = httpx.put(url, json={"text": "v1"}, headers={"if-none-match": "*"})
    assert taken.status_code == 412
    changed = httpx.put(url, json={"text": "v2"}, headers={"if-match": '"1"'})
    assert (changed.json(), changed.headers["etag"]) == ({"text": "v2"}, '"2"')
    stale = httpx.put(url, json={"text": "v3"}, headers={"if-match": '"1"'})
    assert stale.status_code == 412
    assert stale.json()["type"] == "/problems/precondition-failed"
    gone = httpx.put(f"{app_url}/notes/n2", json={"text": "x"}, headers={"if-match": '"1"'})
    assert gone.json()["type"] == "/problems/not-found"
    page = httpx.get(f"{app_url}{stale.json()['type']}")
    assert page.status_code == 200
    assert "Precondition failed" in page.text


def api(reader: Reader) -> httpx.Client:
    return httpx.Client(
        base_url=reader.base_url, headers={"Authorization": f"Bearer {reader.env['KEY']}"}
    )


def subscribe_receiver(reader: Reader, app_url: str) -> dict[str, str]:
    """An endpoint for the receiver app; its secret goes where the README says."""
    endpoint = api(reader).post(
        "/v1/webhook-endpoints", json={"url": f"{app_url}/webhooks", "events": ["payment.*"]}
    )
    assert endpoint.status_code == 201, endpoint.text
    reader.ids["we"] = [endpoint.json()["id"]]
    return {"WEBHOOK_SECRET": endpoint.json()["secret"]}


def exercise_receiver(reader: Reader, app_url: str, workdir: Path) -> None:
    """The receiver: the server's signed delivery is answered 2xx and lands in the inbox."""
    client = api(reader)
    endpoint_id = reader.ids["we"][-1]
    payment = client.post(
        "/v1/payments", json={"amount": 100, "currency": "EUR"}, headers={"Idempotency-Key": "rcv"}
    )
    client.patch(
        f"/v1/payments/{payment.json()['id']}",
        json={"status": "succeeded"},
        headers={"If-Match": payment.headers["etag"]},
    ).raise_for_status()

    def delivered() -> bool:
        deliveries = client.get("/v1/deliveries", params={"endpoint_id": endpoint_id}).json()
        return bool(deliveries["data"]) and all(
            d["status"] == "succeeded" for d in deliveries["data"]
        )

    wait_for(delivered, timeout=TIMEOUT, what="the deliveries to the README's receiver")
    with sqlite3.connect(workdir / "app.db") as inbox:
        types = [row[0] for row in inbox.execute("SELECT type FROM webhook_inbox")]
    assert "payment.succeeded" in types


@dataclass(frozen=True)
class AppExercise:
    env: Callable[[Reader, str], dict[str, str]]
    run: Callable[[Reader, str, Path], None]


EXERCISES = {
    '@app.post("/orders"': AppExercise(no_env, exercise_orders),
    '@app.put("/notes/{note_id}")': AppExercise(no_env, exercise_notes),
    'app.add_route("/webhooks"': AppExercise(subscribe_receiver, exercise_receiver),
}


def serve_app(reader: Reader, block: Block) -> None:
    exercises = [e for marker, e in EXERCISES.items() if marker in block.code]
    assert len(exercises) == 1, f"README line {block.line}: an app block with no exercise here"
    workdir = reader.workdir / f"app-{block.line}"
    workdir.mkdir()
    (workdir / "readme_app.py").write_text(block.code)
    port = free_port()
    app_url = f"http://127.0.0.1:{port}"
    log = (workdir / "app.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "readme_app:app", "--port", str(port)],
        cwd=workdir,
        env={**reader.env, **exercises[0].env(reader, app_url)},
        stdout=log,
        stderr=log,
    )
    try:

        def up() -> bool:
            assert process.poll() is None, (workdir / "app.log").read_text()
            try:
                httpx.get(app_url, timeout=1)
            except httpx.TransportError:
                return False
            return True

        wait_for(up, timeout=TIMEOUT, what=f"the app of README line {block.line}")
        exercises[0].run(reader, app_url, workdir)
    finally:
        process.terminate()
        process.wait(TIMEOUT)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"L{b.line}-{b.lang}" for b in BLOCKS])
def test_readme_block_runs(reader: Reader, block: Block) -> None:
    if block.lang == "sh":
        for command, expected in shell_commands(block.code):
            if not skipped(command):
                run_shell(reader, command, expected)
    elif re.search(r"(?m)^app = ", block.code):
        serve_app(reader, block)
    else:
        program = Program(README, block.line, block.lang, block.code, "")
        code = block.code.replace(README_ADDRESS, reader.address)
        run_program(program, code, reader.workdir, reader.env)


def test_skipped_lines_exist() -> None:
    """Every allow-listed skip still matches a README line, so the list cannot go stale."""
    commands = [c for b in BLOCKS if b.lang == "sh" for c, _ in shell_commands(b.code)]
    for start, why in SKIPPED.items():
        assert any(c.startswith(start) for c in commands), f"{start!r} ({why}) is not in README"


def test_every_block_is_run_or_shown_only() -> None:
    """A block in another language (```bash, ```console, none) would escape the test."""
    for block in ALL_BLOCKS:
        assert block.lang in ("sh", "python", *SHOWN_ONLY), (
            f"README line {block.line}: ```{block.lang} blocks are not run: use ```sh or ```python"
        )
