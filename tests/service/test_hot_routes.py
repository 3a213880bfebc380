"""Hot routes (`plumbing.hot`): served by uvicorn, a hot endpoint answers as its FastAPI route
would (path parameters, the app's exception handlers, the route in the scope), an earlier route
of the same path still wins, and a hot endpoint that would lose a dependency or a parameter is
refused as the app is made."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from local_servers import ThreadedServer
from ustun.service.plumbing.hot import HotRoutes, hot

# Each call of the hot endpoint records the route it finds in its scope; each route FastAPI's
# router handles records its path.
calls: list[tuple[str, Any]] = []
handled: list[str] = []


class _Counted(APIRoute):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        handled.append(self.path)
        await super().handle(scope, receive, send)


def _app() -> FastAPI:
    app = FastAPI()
    router = APIRouter(prefix="/items", route_class=_Counted)

    @router.get("/special")
    async def special() -> dict[str, str]:
        return {"by": "special"}

    @router.get("/{item_id}", response_model=None)
    @hot
    async def item(item_id: str, request: Request) -> Response:
        calls.append((item_id, request.scope.get("route")))
        if item_id == "missing":
            raise HTTPException(404, "no such item")
        return JSONResponse({"by": "item", "id": item_id, "path": request.path_params})

    @router.post("", status_code=201, response_model=None)
    @hot
    async def create(request: Request) -> Response:
        return JSONResponse({"got": await request.json()}, status_code=201)

    app.include_router(router)
    app.router.middleware_stack = HotRoutes(app.router.middleware_stack, app.router)
    return app


@pytest.fixture
def served() -> Iterator[httpx.Client]:
    calls.clear()
    handled.clear()
    with ThreadedServer(_app()) as server, httpx.Client(base_url=server.base_url) as http:
        yield http


def test_a_hot_endpoint_gets_its_path_parameters_and_the_route_in_its_scope(
    served: httpx.Client,
) -> None:
    got = served.get("/items/a1")
    assert (got.status_code, got.json()) == (
        200,
        {"by": "item", "id": "a1", "path": {"item_id": "a1"}},
    )
    [(item_id, route)] = calls
    assert item_id == "a1"
    assert route.path == "/items/{item_id}"  # the access log's and the span's template
    assert handled == []  # not through FastAPI's router


def test_a_hot_endpoint_reads_its_body(served: httpx.Client) -> None:
    got = served.post("/items", json={"n": 1})
    assert (got.status_code, got.json()) == (201, {"got": {"n": 1}})
    assert handled == []


def test_a_hot_endpoints_error_reaches_the_apps_exception_handlers(
    served: httpx.Client,
) -> None:
    got = served.get("/items/missing")
    assert (got.status_code, got.json()) == (404, {"detail": "no such item"})


def test_an_earlier_route_of_the_same_path_still_wins(served: httpx.Client) -> None:
    got = served.get("/items/special")
    assert got.json() == {"by": "special"}
    assert calls == []
    assert handled == ["/items/special"]


def test_other_methods_and_paths_go_to_the_router(served: httpx.Client) -> None:
    assert served.put("/items/a1").status_code == 405
    assert served.get("/nowhere").status_code == 404
    assert calls == []


async def _who() -> str:
    return "someone"


@pytest.mark.parametrize(
    "router",
    [
        pytest.param(APIRouter(), id="own dependency"),
        pytest.param(APIRouter(dependencies=[Depends(_who)]), id="router's dependency"),
    ],
)
def test_a_hot_endpoint_with_a_dependency_is_refused(router: APIRouter) -> None:
    own = [Depends(_who)] if not router.dependencies else []

    @router.get("/x", dependencies=own, response_model=None)
    @hot
    async def x(request: Request) -> Response:
        return Response()

    app = FastAPI()
    app.include_router(router)
    with pytest.raises(TypeError, match="has dependencies"):
        HotRoutes(app.router.middleware_stack, app.router)


def test_a_hot_endpoint_must_take_exactly_its_path_parameters() -> None:
    app = FastAPI()

    @app.get("/things/{thing_id}", response_model=None)
    @hot
    async def thing(request: Request, limit: str) -> Response:
        return Response()

    with pytest.raises(TypeError, match=r"must take `request` and its path's parameters"):
        HotRoutes(app.router.middleware_stack, app.router)


async def test_a_route_added_later_is_checked_at_the_next_request() -> None:
    app = FastAPI()
    hot_routes = HotRoutes(app.router.middleware_stack, app.router)

    @app.get("/late", response_model=None)
    @hot
    async def late(request: Request, extra: str) -> Response:
        return Response()

    async def never(*_: Any) -> Any:
        raise AssertionError("the request went on")

    scope = {"type": "http", "method": "GET", "path": "/late", "root_path": "", "headers": []}
    with pytest.raises(TypeError, match="must take"):
        await hot_routes(scope, never, never)
