"""The ```python blocks of README.md and docs/*.md, run as the programs they must be.

Conventions for a block's author:
- A block is a complete program (imports, setup, the worker where one is needed): it runs with
  `python` in a directory of its own and must exit 0 within `TIMEOUT` seconds.
- A line that starts with `print(` and ends with `# → text` states what it prints: `text` must
  be a line of the program's output.
- `<!-- run: serve -->` on the line before a block of docs/ runs it beside a fresh
  `ustun serve` (SQLite, `USTUN_WEBHOOK_ALLOW_PRIVATE=1`, its embedded worker), whose URL and
  API key are in `USTUN_URL` and `USTUN_KEY`; without it a block runs alone. README's blocks run
  beside the README's own server (tests/test_readme.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
ARROW = re.compile(r"^\s*print\(.*#\s*→\s*(.+?)\s*$", re.M)
SERVE = "<!-- run: serve -->"
TIMEOUT = 120.0


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    # The line before the opening fence: where a block's run directive goes.
    before: str


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, in order."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        head = text[: match.start()].rstrip("\n")
        found.append(
            Block(
                path,
                text.count("\n", 0, match.start()) + 1,
                match.group(1),
                match.group(2),
                head.rsplit("\n", 1)[-1],
            )
        )
    return found


def run_program(block: Block, code: str, cwd: Path, env: dict[str, str]) -> str:
    """Run `code` (the block's, adapted) as a script in `cwd`; check its exit and what it prints.

    Returns its output.
    """
    script = cwd / f"{block.path.stem}_{block.line}.py"
    script.write_text(code)
    where = f"{block.path.name} line {block.line}"
    try:
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{where} still ran after {TIMEOUT} s:\n{exc.stderr}") from None
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stderr}"
    printed = done.stdout.splitlines()
    for expected in ARROW.findall(block.code):
        assert expected in printed, f"{where} did not print {expected!r}:\n{done.stdout}"
    return done.stdout
