"""Payload filters: which events an endpoint gets by their `data`, beyond their type.

Pure code, no I/O. The language is MongoDB's query language, cut down (as Convoy's and
Outpost's are): a filter is a JSON object of `"dotted.path": condition` pairs that must all
hold, plus the logical operators at its top.

- A condition is a literal, which the value at the path must equal (JSON equality: `1` equals
  `1.0`, `true` is not `1`; an object or array equals a whole equal value), or an operator
  object: `{"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$in" | "$nin" | "$exists": …}`,
  whose operators must all hold.
- `$gt`, `$gte`, `$lt`, `$lte` compare numbers with numbers and strings with strings (by code
  point); any other pair is no match, never an error (booleans are not numbers).
- A path whose value is missing matches only `$exists: false`, `$ne` and `$nin`. A segment of
  digits indexes an array (`items.0.sku`).
- `$and` and `$or` take a non-empty list of filters, `$not` one filter.

`parse(obj)` checks a filter once, at registration, within the bounds below, and raises
`FilterError` naming the position of what it refuses (`filter.$and[1].amount.$gt`);
`Filter.matches(data)` then never raises, whatever JSON `data` is. `cached(text)` parses a
stored filter once per text.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ustun.errors import UstunError

# Bounds checked at the door (`parse`), so that matching an event stays cheap.
MAX_DEPTH = 8  # filters nested in `$and`/`$or`/`$not`, and objects or arrays nested in a value
MAX_CONDITIONS = 64  # equalities and operators, over the whole filter
MAX_SIZE = 4096  # bytes of the filter as stored (`text`)
MAX_IN = 100  # values of one `$in` or `$nin`
# How many parsed filters `cached` keeps.
CACHE_SIZE = 1024

ROOT = "filter"
LOGICAL = ("$and", "$or", "$not")
COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists")


class FilterError(UstunError, ValueError):
    """A filter refused by `parse`: `position` is where (`filter.$and[1].amount.$gt`), `reason`
    what is wrong there."""

    def __init__(self, position: str, reason: str) -> None:
        super().__init__(f"{position}: {reason}")
        self.position = position
        self.reason = reason


# The value at a path that is not there.
_MISSING: Any = object()


_NUMBERS = (int, float)


def _is_number(value: object) -> bool:
    return isinstance(value, _NUMBERS) and not isinstance(value, bool)


def _scalar(value: Any) -> tuple[Any, ...] | None:
    """A key of a JSON scalar, equal for equal scalars only (`1` and `1.0`, but not `true`);
    None for an object, an array or `_MISSING`. Makes `$eq` and `$in` of scalars a hash look-up."""
    if value is None:
        return (None,)
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, _NUMBERS):
        return (float, value)
    if isinstance(value, str):
        return (str, value)
    return None


def _equal(wanted: Any, value: Any) -> bool:
    """JSON equality of a filter's `wanted` value and an event's `value`; recurses only as deep
    as `wanted` (bounded by `MAX_DEPTH`), however deep `value` is."""
    if isinstance(wanted, bool) or isinstance(value, bool):
        return wanted is value
    if _is_number(wanted):
        return _is_number(value) and wanted == value
    if isinstance(wanted, str):
        return isinstance(value, str) and wanted == value
    if wanted is None:
        return value is None
    if isinstance(wanted, list):
        return (
            isinstance(value, list)
            and len(wanted) == len(value)
            and all(_equal(w, v) for w, v in zip(wanted, value, strict=True))
        )
    return (
        isinstance(value, dict)
        and wanted.keys() == value.keys()
        and all(_equal(w, value[k]) for k, w in wanted.items())
    )


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def _test(op: str, operand: Any) -> Callable[[Any], bool]:
    """The test `{op: operand}` makes of the value at a path (`_MISSING` when there is none,
    which `_equal` finds equal to nothing)."""
    if op in _ORDER:
        compare = _ORDER[op]
        if isinstance(operand, str):
            return lambda value: isinstance(value, str) and compare(value, operand)
        return lambda value: _is_number(value) and compare(value, operand)
    if op in ("$eq", "$ne"):
        equal = _member([operand])
        return equal if op == "$eq" else lambda value: not equal(value)
    if op in ("$in", "$nin"):
        member = _member(operand)
        return member if op == "$in" else lambda value: not member(value)
    return lambda value: (value is not _MISSING) is operand  # $exists


def _member(values: list[Any]) -> Callable[[Any], bool]:
    """Whether a value equals one of `values`: scalars by a hash look-up, objects and arrays
    one by one."""
    scalars = frozenset(k for k in map(_scalar, values) if k is not None)
    whole = tuple(v for v in values if _scalar(v) is None)

    def member(value: Any) -> bool:
        key = _scalar(value)
        if key is not None:
            return key in scalars
        return any(_equal(w, value) for w in whole)

    return member


@dataclass(frozen=True, slots=True)
class _Path:
    """A dotted path into `data`: each step a key, or an index when it is a number."""

    steps: tuple[tuple[str, int | None], ...]

    def find(self, data: Any) -> Any:
        for key, index in self.steps:
            if isinstance(data, dict):
                data = data.get(key, _MISSING)
            elif isinstance(data, list) and index is not None and index < len(data):
                data = data[index]
            else:
                return _MISSING
        return data


def _index(segment: str) -> int | None:
    return int(segment) if segment.isascii() and segment.isdigit() else None


class _Node:
    """A parsed filter, or a part of one."""

    __slots__ = ()

    def holds(self, data: Any) -> bool:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class _All(_Node):
    """A filter's pairs, or `$and`: every part holds."""

    parts: tuple[_Node, ...]

    def holds(self, data: Any) -> bool:
        return all(part.holds(data) for part in self.parts)


@dataclass(frozen=True, slots=True)
class _Any(_Node):
    """`$or`: some part holds."""

    parts: tuple[_Node, ...]

    def holds(self, data: Any) -> bool:
        return any(part.holds(data) for part in self.parts)


@dataclass(frozen=True, slots=True)
class _Not(_Node):
    """`$not`: the filter does not hold."""

    part: _Node

    def holds(self, data: Any) -> bool:
        return not self.part.holds(data)


@dataclass(frozen=True, slots=True)
class _Where(_Node):
    """`"path": condition`: every test holds of the value at the path."""

    path: _Path
    tests: tuple[Callable[[Any], bool], ...]

    def holds(self, data: Any) -> bool:
        value = self.path.find(data)
        return all(test(value) for test in self.tests)


@dataclass(frozen=True, slots=True)
class Filter:
    """A checked filter, and its `text` as stored."""

    text: str
    _root: _Node

    def matches(self, data: Any) -> bool:
        """Whether an event whose `data` is this passes the filter; never raises."""
        return self._root.holds(data)


def dumps(obj: Any) -> str:
    """A filter's stored text: compact JSON, non-ASCII escaped."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def parse(obj: Any) -> Filter:
    """Check `obj` (a filter as JSON gives it) and make it a `Filter`; `FilterError` naming the
    position of the first thing refused."""
    root = _Parser().filter(obj, ROOT, 1)
    text = dumps(obj)
    if len(text) > MAX_SIZE:
        raise FilterError(ROOT, f"is {len(text)} bytes as JSON; at most {MAX_SIZE}")
    return Filter(text, root)


@lru_cache(maxsize=CACHE_SIZE)
def cached(text: str) -> Filter:
    """The filter stored as `text` (`Filter.text`), parsed once per text."""
    return parse(json.loads(text))


class _Parser:
    """One `parse`: counts the conditions as it goes."""

    def __init__(self) -> None:
        self.conditions = 0

    def _count(self, at: str) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise FilterError(at, f"a filter holds at most {MAX_CONDITIONS} conditions")

    def filter(self, obj: Any, at: str, depth: int) -> _Node:
        if not isinstance(obj, dict):
            raise FilterError(at, "must be a filter: an object of `path: condition` pairs")
        if depth > MAX_DEPTH:
            raise FilterError(at, f"filters nest at most {MAX_DEPTH} deep")
        parts = []
        for key, condition in obj.items():
            _key(key, at)
            here = f"{at}.{key}"
            if key.startswith("$"):
                parts.append(self._logical(key, condition, here, depth))
            else:
                parts.append(self._path(key, condition, here))
        return _All(tuple(parts))

    def _logical(self, op: str, operand: Any, at: str, depth: int) -> _Node:
        if op == "$not":
            return _Not(self.filter(operand, at, depth + 1))
        if op not in LOGICAL:
            known = ", ".join(LOGICAL)
            if op in COMPARISONS:
                raise FilterError(at, f'`{op}` applies to a path: {{"path": {{"{op}": …}}}}')
            raise FilterError(at, f"unknown operator `{op}`; a filter's top takes {known}")
        if not isinstance(operand, list) or not operand:
            raise FilterError(at, f"`{op}` takes a non-empty list of filters")
        parts = tuple(self.filter(item, f"{at}[{i}]", depth + 1) for i, item in enumerate(operand))
        return _All(parts) if op == "$and" else _Any(parts)

    def _path(self, key: str, condition: Any, at: str) -> _Node:
        segments = key.split(".")
        if any(not s for s in segments):
            raise FilterError(at, "a path is dot-separated names, none of them empty")
        path = _Path(tuple((s, _index(s)) for s in segments))
        if isinstance(condition, dict) and any(str(k).startswith("$") for k in condition):
            return _Where(path, self._operators(condition, at))
        self._count(at)
        _value(condition, at, 1)
        return _Where(path, (_test("$eq", condition),))

    def _operators(self, condition: dict[str, Any], at: str) -> tuple[Callable[[Any], bool], ...]:
        tests = []
        for op, operand in condition.items():
            _key(op, at)
            here = f"{at}.{op}"
            if not op.startswith("$"):
                raise FilterError(
                    here, "mixes operators and fields; compare a whole object with `$eq`"
                )
            if op not in COMPARISONS:
                if op in LOGICAL:
                    raise FilterError(here, f"`{op}` goes at a filter's top, around paths")
                raise FilterError(
                    here, f"unknown operator `{op}`; a path takes {', '.join(COMPARISONS)}"
                )
            self._count(here)
            _operand(op, operand, here)
            tests.append(_test(op, operand))
        return tuple(tests)


def _operand(op: str, operand: Any, at: str) -> None:
    """Refuse an operand `op` cannot take."""
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if not (_is_number(operand) or isinstance(operand, str)):
            raise FilterError(at, f"`{op}` compares with a number or a string")
    elif op in ("$in", "$nin"):
        if not isinstance(operand, list):
            raise FilterError(at, f"`{op}` takes a list of values")
        if len(operand) > MAX_IN:
            raise FilterError(at, f"`{op}` takes at most {MAX_IN} values")
        for i, item in enumerate(operand):
            _value(item, f"{at}[{i}]", 1)
    elif op == "$exists":
        if not isinstance(operand, bool):
            raise FilterError(at, "`$exists` takes true or false")
    else:
        _value(operand, at, 1)


def _key(key: Any, at: str) -> None:
    if not isinstance(key, str):
        raise FilterError(at, f"has a key that is not a string: {key!r}")


def _value(value: Any, at: str, depth: int) -> None:
    """Refuse what is not a JSON value, a value nested deeper than `MAX_DEPTH`, and a number
    JSON cannot carry."""
    if depth > MAX_DEPTH:
        raise FilterError(at, f"values nest at most {MAX_DEPTH} deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise FilterError(at, "must be a finite number")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _value(item, f"{at}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _key(key, at)
            _value(item, f"{at}.{key}", depth + 1)
    elif not (value is None or isinstance(value, str | int | float)):
        raise FilterError(at, f"must be a JSON value, not {type(value).__name__}")
