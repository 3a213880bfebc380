"""A scripted local HTTP server: each test queues the answers it wants and reads what arrived."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from local_servers import METHODS, Script, ThreadedServer


@pytest.fixture(scope="module")
def _scripted_server() -> Iterator[tuple[ThreadedServer, list[Script]]]:
    current = [Script()]

    async def endpoint(request: Request) -> Response:
        return await current[0].endpoint(request)

    app = Starlette(routes=[Route("/{path:path}", endpoint, methods=METHODS)])
    with ThreadedServer(app) as server:
        yield server, current


@pytest.fixture
def script(_scripted_server: tuple[ThreadedServer, list[Script]]) -> Script:
    """A fresh script on the module's server."""
    _, current = _scripted_server
    current[0] = Script()
    return current[0]


@pytest.fixture
def base_url(_scripted_server: tuple[ThreadedServer, list[Script]]) -> str:
    """Where the scripted server listens."""
    return _scripted_server[0].base_url
