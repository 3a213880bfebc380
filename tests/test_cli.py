"""The `ustun` command's event loop choice: uvloop for the worker when installed."""

from __future__ import annotations

import asyncio

import pytest

from ustun.cli import _run, fast_loop_factory


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_worker_loop_is_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    assert _run(_loop_module, fast_loop_factory()).startswith("uvloop")


def test_default_loop_is_asyncio() -> None:
    assert _run(_loop_module).startswith("asyncio")
