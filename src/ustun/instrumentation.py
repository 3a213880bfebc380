"""Instrumentation hooks: pillars report what happened, the service decides what to do with it.

In the spirit of stamina's hooks: a pillar calls `emit("idempotency", outcome="replayed")`
and knows nothing about Prometheus; the service adds a hook that turns events into metrics.
With no hook installed, `emit` costs one empty loop.

Events ustun emits (name: labels, value):
- `idempotency`: `outcome` in executed | replayed | in-progress | reused.
- `delivery_attempt`: `outcome` in succeeded | failed | timeout | error; value = seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("ustun.instrumentation")


@dataclass(frozen=True, slots=True)
class Event:
    """Something worth counting: a name, its labels and an optional measurement."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    value: float | None = None


Hook = Callable[[Event], None]

_hooks: list[Hook] = []


def add_hook(hook: Hook) -> Callable[[], None]:
    """Call `hook` with every event from now on; return a function that removes it again."""
    _hooks.append(hook)

    def remove() -> None:
        if hook in _hooks:
            _hooks.remove(hook)

    return remove


def emit(name: str, value: float | None = None, **labels: str) -> None:
    """Report an event to every hook; a failing hook is logged and never breaks the caller."""
    if not _hooks:
        return
    event = Event(name, labels, value)
    for hook in tuple(_hooks):
        try:
            hook(event)
        except Exception:
            log.exception("instrumentation hook %r failed on %s", hook, name)
