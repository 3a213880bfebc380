"""The registry of job kinds: a name, the coroutine that runs it, and its retry policy.

A `Registry` is passed to the runner (and to `enqueue`, for a kind's retry policy); a worker
runs only the kinds it knows. There is no default one: an app makes its own (`kinds =
Registry()`, `@kinds.kind("name")`), and each module named in `USTUN_JOB_MODULES` holds one
as its `kinds`, which the service adds to its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ustun.errors import TransientError
from ustun.jobs.records import Job, Result
from ustun.jobs.store import FinalHook

if TYPE_CHECKING:
    from ustun.jobs.context import JobContext

Handler = Callable[["JobContext"], Awaitable[Result | None]]
# Which jobs a final hook acts on: it does nothing for the others.
JobFilter = Callable[[Job], bool]

DEFAULT_RETRY_ON: tuple[type[BaseException], ...] = (TransientError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class JobKind:
    """A registered kind of job."""

    name: str
    handler: Handler
    max_attempts: int | None
    retry_on: tuple[type[BaseException], ...]


class Registry:
    """Job kinds by name, plus hooks to run when a job reaches `done` or `failed`."""

    def __init__(self) -> None:
        self._kinds: dict[str, JobKind] = {}
        self.final_hooks: list[FinalHook] = []
        self._hook_filters: dict[FinalHook, JobFilter] = {}

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        max_attempts: int | None = None,
        retry_on: tuple[type[BaseException], ...] = DEFAULT_RETRY_ON,
    ) -> None:
        """Add (or replace) the kind `name`."""
        self._kinds[name] = JobKind(name, handler, max_attempts, retry_on)

    def kind(
        self,
        name: str,
        *,
        max_attempts: int | None = None,
        retry_on: tuple[type[BaseException], ...] = DEFAULT_RETRY_ON,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of `register`."""

        def decorate(handler: Handler) -> Handler:
            self.register(name, handler, max_attempts=max_attempts, retry_on=retry_on)
            return handler

        return decorate

    def on_final(self, hook: FinalHook, *, acts_on: JobFilter | None = None) -> None:
        """Run `hook` in the same transaction as every job's final `done` / `failed` state.

        `acts_on` declares the jobs the hook does something for (all by default): a batch of
        jobs it does nothing for can be settled without a transaction around it.
        """
        if hook not in self.final_hooks:
            self.final_hooks.append(hook)
        if acts_on is None:
            self._hook_filters.pop(hook, None)
        else:
            self._hook_filters[hook] = acts_on

    def final_hooks_for(self, batch: Iterable[Job]) -> list[FinalHook]:
        """The final hooks that act on at least one job of `batch`."""
        batch = list(batch)
        return [
            hook
            for hook in self.final_hooks
            if (acts_on := self._hook_filters.get(hook)) is None or any(map(acts_on, batch))
        ]

    def copy(self) -> Registry:
        """A new registry with this one's kinds and final hooks, to add to separately."""
        other = Registry()
        other.include(self)
        return other

    def include(self, other: Registry) -> None:
        """Add `other`'s kinds (replacing those of the same name) and final hooks to this one."""
        self._kinds.update(other._kinds)
        for hook in other.final_hooks:
            self.on_final(hook, acts_on=other._hook_filters.get(hook))

    def get(self, name: str) -> JobKind | None:
        """The kind called `name`, if registered."""
        return self._kinds.get(name)

    def names(self) -> list[str]:
        """Every registered kind's name."""
        return sorted(self._kinds)
