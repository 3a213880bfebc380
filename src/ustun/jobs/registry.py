"""The registry of job kinds: a name, the coroutine that runs it, and its retry policy.

A `Registry` is passed to the runner (and to `enqueue`, for a kind's retry policy); a worker
runs only the kinds it knows. `@job_kind("name")` adds to the default `registry`: modules named
in `USTUN_JOB_MODULES` add their kinds there, and the service copies it into its own.
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
        other._kinds = dict(self._kinds)
        other.final_hooks = list(self.final_hooks)
        other._hook_filters = dict(self._hook_filters)
        return other

    def get(self, name: str) -> JobKind | None:
        """The kind called `name`, if registered."""
        return self._kinds.get(name)

    def names(self) -> list[str]:
        """Every registered kind's name."""
        return sorted(self._kinds)


# The default registry: what `@job_kind` fills, and what `Runner` and `enqueue` use unless given
# another.
registry = Registry()
job_kind = registry.kind
