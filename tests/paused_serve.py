"""`ustun serve` whose transfers stop between their debit and their credit (a crash test's hook).

Run as `python tests/paused_serve.py <signal file> serve …`: a transfer touches the signal file,
then waits forever inside its transaction, so that the test can kill the process mid-write.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path

from ustun import cli, service


async def hold_transfer(signal: Path) -> None:
    """Say the transfer is mid-write, then never return."""
    await asyncio.to_thread(signal.touch)
    await asyncio.Event().wait()


if __name__ == "__main__":
    signal = Path(sys.argv.pop(1))
    # `ustun serve` takes `create_app` from `ustun.service` when it starts.
    service.create_app = functools.partial(
        service.create_app, between_transfer_moves=functools.partial(hold_transfer, signal)
    )
    cli.app()
