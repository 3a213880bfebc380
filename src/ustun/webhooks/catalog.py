"""The event catalogue: event types as first-class, registered from Python, schemas versioned.

An event type has a name (the grammar of endpoint filters, without wildcards), a description,
a JSON Schema of its `data` per version (numbered from 1; the latest is current), an example
and a `deprecated` flag. `register(...)` adds one to the module's default `Catalog`; an app
that wants its own makes a `Catalog` and `use`s it. With `strict` on, `emit` checks every event
against the current schema of its type (an unregistered type is refused too): a test-time
check, off by default so that production pays one attribute read per event and nothing more.
A type may carry its own `retry_schedule`, which the dispatcher follows for its deliveries in
place of the default one (`USTUN_WEBHOOK_RETRY_SCHEDULE`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ustun.errors import ProblemError
from ustun.webhooks.patterns import is_pattern

if TYPE_CHECKING:
    from jsonschema.protocols import Validator
    from pydantic import BaseModel

MAX_NAME = 100
"""The longest event type: the width of the events' `type` column."""
MAX_SCHEMA_BYTES = 64 * 1024
"""The largest schema (as compact JSON) the catalogue takes: a schema is code, not data."""
MAX_ERRORS = 20
"""The most failing paths one refusal lists."""
MAX_RETRIES = 100
"""The most delays a type's retry schedule may have."""


@dataclass(frozen=True, slots=True)
class EventType:
    """One event type: its name, what it means, and the schema of its `data` now.

    `previous` holds the schemas of the earlier versions, oldest first. `thin`: the event is
    about an object the API serves, so a `thin` endpoint gets only its `id` and `url`.
    """

    name: str
    description: str
    schema: dict[str, Any]
    thin: bool = True
    example: dict[str, Any] | None = None
    deprecated: bool = False
    previous: tuple[dict[str, Any], ...] = ()
    # Seconds before each retry of a delivery of this type; None: the dispatcher's default.
    retry_schedule: tuple[float, ...] | None = None

    @property
    def version(self) -> int:
        """The current version's number (the first is 1)."""
        return len(self.previous) + 1

    @property
    def versions(self) -> tuple[dict[str, Any], ...]:
        """Every version's schema, oldest first: version n is `versions[n - 1]`."""
        return (*self.previous, self.schema)


def _schema_of(name: str, schema: Mapping[str, Any] | type[BaseModel]) -> dict[str, Any]:
    """`schema` as a JSON Schema dict (a pydantic model's own), checked and bounded."""
    if isinstance(schema, type) and callable(getattr(schema, "model_json_schema", None)):
        schema = schema.model_json_schema()  # a pydantic model; pydantic is not imported here
    if not isinstance(schema, Mapping):
        raise ValueError(f"{name}: a schema is a JSON Schema dict or a pydantic model class")
    try:
        text = json.dumps(schema, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: the schema is not JSON ({exc})") from None
    size = len(text.encode())
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"{name}: the schema is {size} bytes, over {MAX_SCHEMA_BYTES}")
    # Imported here: `jsonschema` costs ~70 ms to import, which a process that registers
    # nothing (a worker, an app without a catalogue) should not pay.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    copied: dict[str, Any] = json.loads(text)  # a copy the caller cannot change afterwards
    try:
        validator_for(copied, default=Draft202012Validator).check_schema(copied)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"{name}: not a valid JSON Schema at {where}: {exc.message}") from None
    return copied


def _schedule_of(name: str, delays: Sequence[float] | None) -> tuple[float, ...] | None:
    """`delays` checked: 1 to `MAX_RETRIES` finite, non-negative numbers of seconds."""
    if delays is None:
        return None
    checked = tuple(float(d) for d in delays)
    if not 0 < len(checked) <= MAX_RETRIES or not all(math.isfinite(d) and d >= 0 for d in checked):
        raise ValueError(
            f"{name}: a retry schedule is 1 to {MAX_RETRIES} delays in seconds, each finite "
            "and not negative (e.g. [5, 300, 1800])"
        )
    return checked


def _validator(schema: dict[str, Any]) -> Validator:
    """A validator of `schema` that checks `format`s too (`date-time`, `uri`, …)."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _field(path: Iterable[Any]) -> str:
    """A failing path as the service names a body's fields: `data.items.0.amount`."""
    return ".".join(str(part) for part in ("data", *path))


class Catalog:
    """A registry of event types; `strict` makes `emit` validate against it."""

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._types: dict[str, EventType] = {}
        self._validators: dict[str, Validator] = {}

    def register(
        self,
        name: str,
        *,
        schema: Mapping[str, Any] | type[BaseModel],
        description: str = "",
        example: dict[str, Any] | None = None,
        version: int = 1,
        deprecated: bool = False,
        thin: bool = True,
        retry_schedule: Sequence[float] | None = None,
    ) -> EventType:
        """Add `name` (version 1), or version `version` of a registered type (the next one
        only: 2 after 1); its schema becomes current. `ValueError` names what is wrong: a name
        outside the grammar, a schema that is not JSON Schema or over `MAX_SCHEMA_BYTES`, an
        example its schema refuses, a version out of turn, a retry schedule out of bounds.
        `retry_schedule` (seconds before each retry) replaces the dispatcher's default for
        this type's deliveries; a new version without one keeps the previous version's."""
        if not (len(name) <= MAX_NAME and "*" not in name and is_pattern(name)):
            raise ValueError(
                f"{name!r}: an event type is dot-separated lowercase words "
                f"(`invoice.paid`), at most {MAX_NAME} characters"
            )
        checked = _schema_of(name, schema)
        schedule = _schedule_of(name, retry_schedule)
        known = self._types.get(name)
        expected = 1 if known is None else known.version + 1
        if version != expected:
            raise ValueError(
                f"{name}: version {version} out of turn; the next version is {expected}"
                + ("" if known is None else f" (pass version={expected} to add one)")
            )
        validator = _validator(checked)
        if example is not None and not validator.is_valid(example):
            raise ValueError(f"{name}: the example does not match the schema of version {version}")
        event = EventType(
            name,
            description or (known.description if known else ""),
            checked,
            thin=thin,
            example=example,
            deprecated=deprecated,
            previous=() if known is None else known.versions,
            retry_schedule=schedule if schedule or known is None else known.retry_schedule,
        )
        self._types[name] = event
        self._validators[name] = validator
        return event

    def __iter__(self) -> Iterator[EventType]:
        return iter(self._types.values())

    def __len__(self) -> int:
        return len(self._types)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def get(self, name: str) -> EventType | None:
        """The event type `name`, or None."""
        return self._types.get(name)

    def retry_schedule(self, name: str) -> tuple[float, ...] | None:
        """The retry schedule `name` was registered with, or None (the default applies)."""
        event = self._types.get(name)
        return None if event is None else event.retry_schedule

    def check(self, event_type: str, data: Any) -> None:
        """Raise 422 `validation-error` if `event_type` is not registered or `data` fails its
        current schema; the errors name each failing path (`data.amount`)."""
        validator = self._validators.get(event_type)
        if validator is None:
            message = f"Event type {event_type!r} is not in the event catalogue."
            raise ProblemError(
                "validation-error",
                message,
                errors=[{"field": "type", "message": message, "type": "unknown_event_type"}],
            )
        found = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.path])
        if not found:
            return
        errors = [
            {"field": _field(e.absolute_path), "message": e.message, "type": str(e.validator)}
            for e in found[:MAX_ERRORS]
        ]
        fields = ", ".join(dict.fromkeys(e["field"] for e in errors))
        raise ProblemError(
            "validation-error",
            f"Invalid value in {fields} for event type {event_type}.",
            errors=errors,
        )


default = Catalog()
"""The module's catalogue: what `register` adds to."""
register = default.register
active: Catalog = default
"""The catalogue `emit` validates against when it is `strict`: `default` unless `use` says."""


def use(catalog: Catalog) -> Catalog:
    """Make `catalog` the one `emit` validates against; the one it was, to restore later."""
    global active
    before, active = active, catalog
    return before
