"""Which route of a Starlette/FastAPI app a request hits, found as its router finds it: the
first route, in order, that fully matches the path and method, with FastAPI's included routers
opened up into their routes. The routes are read once per router, not once per request."""

from __future__ import annotations

import re
import weakref
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from starlette._utils import get_route_path
from starlette.routing import Match
from starlette.types import Scope


class Entry(NamedTuple):
    """A route, with its path pattern and methods when it has them (else `route.matches`
    decides whether a request hits it)."""

    route: Any
    regex: re.Pattern[str] | None
    methods: Collection[str] | None

    @property
    def original(self) -> Any:
        """The route as declared: behind an included router's context, FastAPI's own route
        (the one it puts in `scope["route"]`)."""
        return getattr(self.route, "original_route", self.route)


def matched(table: Sequence[Entry], scope: Scope) -> tuple[Entry, re.Match[str] | None] | None:
    """The entry of the first route in `table` (a router's `entries`) that fully matches the
    HTTP request `scope`, with the match of its path (None where `route.matches` decided);
    None if no route does."""
    method, path = scope["method"], get_route_path(scope)
    for entry in table:
        if entry.regex is not None and entry.methods is not None:
            if method in entry.methods:
                found = entry.regex.match(path)
                if found is not None:
                    return entry, found
        elif entry.route.matches(scope)[0] is Match.FULL:
            return entry, None
    return None


def entries(router: Any) -> list[Entry]:
    """Every route of `router`, in order, opened up (read again when routes are added)."""
    routes: Sequence[Any] = router.routes
    cached = _tables.get(id(router))
    if cached is None or cached[0]() is not router or cached[1] != len(routes):
        table = [
            Entry(route, getattr(route, "path_regex", None), getattr(route, "methods", None))
            for route in _opened(routes)
        ]
        cached = _tables[id(router)] = (weakref.ref(router), len(routes), table)
    return cached[2]


# Per router (by id, checked against a weak reference: routers are unhashable): how many routes
# it had, and every route opened up.
_tables: dict[int, tuple[weakref.ref[Any], int, list[Entry]]] = {}


def _opened(routes: Iterable[Any]) -> Iterator[Any]:
    """Every route, with FastAPI's lazily included routers opened up into their own routes."""
    for route in routes:
        opened = getattr(route, "effective_route_contexts", None)
        if callable(opened):
            yield from opened()
        else:
            yield route
