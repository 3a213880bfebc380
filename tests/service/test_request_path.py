"""The request path's plumbing: nothing on it hops to a thread."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts

from ustun.service import create_app
from ustun.settings import Settings


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    """Every callable FastAPI runs for `dependant`: its own and its dependencies', recursively."""
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def test_no_route_or_dependency_runs_in_the_threadpool() -> None:
    """FastAPI runs a sync `def` route or dependency in its threadpool: a thread hop per call."""
    app = create_app(Settings(database_url="sqlite:///unused.db"))
    sync = {
        f"{route.path}: {getattr(call, '__qualname__', call)}"
        for route in iter_route_contexts(app.routes)
        if isinstance(getattr(route, "dependant", None), Dependant)
        for call in _calls(route.dependant)
        if not inspect.iscoroutinefunction(call)
    }
    assert sync == set()
