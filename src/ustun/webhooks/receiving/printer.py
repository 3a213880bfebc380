"""`ustun listen`: a local receiver that verifies each webhook and prints it as a table."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from starlette.applications import Starlette
from starlette.routing import Mount

from ustun.webhooks.receiving.inbox import MemoryInbox
from ustun.webhooks.receiving.receiver import WebhookReceiver


def app(secret: str, *, tolerance: float, console: Console | None = None) -> Starlette:
    """A Starlette app that accepts verified webhooks on any path and prints them."""
    out = console or Console()
    receiver = WebhookReceiver(secret, inbox=MemoryInbox(), tolerance=tolerance)

    @receiver.on("*")
    async def show(event: dict[str, Any]) -> None:
        table = Table(title=f"{event.get('type')}  {event.get('id')}", title_justify="left")
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        table.add_row("created_at", str(event.get("created_at")))
        table.add_row("api_version", str(event.get("api_version")))
        table.add_row("data", json.dumps(event.get("data"), indent=2, ensure_ascii=False))
        out.print(table)

    return Starlette(routes=[Mount("/", app=receiver)])
