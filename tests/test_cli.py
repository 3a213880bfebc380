"""The `ustun` command's event loop: uvloop when installed, asyncio's own otherwise."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from ustun import cli


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_commands_run_on_uvloop_when_it_is_installed() -> None:
    assert cli._run(_loop_type) is uvloop.Loop


def test_without_uvloop_commands_run_on_the_asyncio_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    loop_type = cli._run(_loop_type)
    assert issubclass(loop_type, asyncio.BaseEventLoop)
    assert not issubclass(loop_type, uvloop.Loop)
