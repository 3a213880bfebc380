"""Following jobs as they change: one reader per process feeds every open event stream.

Every open `GET /v1/jobs/{id}/events` is a `Stream` of this process's `Watch`. One loop (started
by the first stream, ending after the last) reads, every `interval`, the versions of all the
watched jobs in one statement per `BATCH` of them, then the new events of those that changed,
and hands each stream the events after the last one it got. A new stream wakes the loop at
once; streams opening together share one read of their jobs. So the database sees the same few
statements a second whether one stream or a thousand are open, on the watch's own `Database`
(a second one on the same URL, read by this loop alone, one connection at a time), never on a
connection that requests write with.

PostgreSQL could NOTIFY each new job event instead, but a NOTIFY serialises the commits that
send it (see migration 0007): every progress update would pay for it to save a poll that costs
one indexed statement per interval.

Open streams are capped per account and in all (429 before any database work).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterable

from ustun.defaults import DEFAULT_JOB_WATCH_INTERVAL
from ustun.errors import ProblemError
from ustun.http.retry_after import format_retry_after
from ustun.jobs import states
from ustun.jobs.adapters import store_for
from ustun.jobs.records import JobEvent
from ustun.jobs.store import JobStore
from ustun.store import Database

log = logging.getLogger("ustun.jobs")

# Jobs per read of their events (an OR of `(job, first version)`).
EVENT_BATCH = 100
# Events of one job per read: a job with more (one retried many times) is read on in the next.
WINDOW = 100
# What a refused stream is told to wait: streams end with their jobs, a few seconds at most.
CAP_RETRY_AFTER = 5
# The name of the loop's task (each process has at most one running).
LOOP_NAME = "ustun job streams"


class Stream:
    """One open event stream of one job: the events read for it and not yet taken."""

    def __init__(self, account_id: str, job_id: str, after: int) -> None:
        self.account_id = account_id
        self.job_id = job_id
        self.after = after
        # The job version up to which every event was handed over; None until the first read.
        self.seen: int | None = None
        self.found = False
        self.ended = False
        self._pending: list[JobEvent] = []
        self._read = asyncio.Event()  # the first read of the job is done
        self._ready = asyncio.Event()  # there are events to take, or it ended
        self._failed: Exception | None = None

    async def opened(self) -> bool:
        """Wait for the first read of the job: whether it is this account's (raises what that
        read raised)."""
        await self._read.wait()
        if self._failed is not None:
            raise self._failed
        return self.found

    @property
    def exhausted(self) -> bool:
        """Nothing will ever come: the client saw the job's final event already."""
        return self.ended and not self._pending

    async def next(self) -> list[JobEvent]:
        """The events read since the last call, once there are some ([] once it ended)."""
        if not self._pending and not self.ended:
            self._ready.clear()
            await self._ready.wait()
        events, self._pending = self._pending, []
        return events

    def _hand(self, events: Iterable[JobEvent] = (), *, ended: bool = False) -> None:
        self._pending.extend(events)
        self.ended = self.ended or ended
        if self._pending or self.ended:
            self._ready.set()

    def _opened(self, found: bool) -> None:
        self.found = found
        self._read.set()

    def _fail(self, error: Exception) -> None:
        self._failed = error
        self._read.set()


class Watch:
    """This process's open event streams, by job, and the loop that feeds them."""

    def __init__(
        self,
        reader: Database,
        *,
        max_streams: int,
        max_per_account: int,
        interval: float = DEFAULT_JOB_WATCH_INTERVAL,
    ) -> None:
        self.max_streams = max_streams
        self.max_per_account = max_per_account
        self.interval = interval
        self.reader = reader
        self._store: JobStore = store_for(reader)
        self._streams: dict[str, set[Stream]] = {}
        self._accounts: Counter[str] = Counter()
        self._count = 0
        self._opening: list[Stream] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def open_streams(self) -> int:
        """How many streams are open in this process."""
        return self._count

    def open(self, account_id: str, job_id: str, after: int) -> Stream:
        """A stream of the events after `after`; 429 past either cap. Close it with `close`."""
        if self._accounts[account_id] >= self.max_per_account:
            raise ProblemError(
                "quota-exceeded",
                f"This account has {self.max_per_account} job event streams open here, the "
                f"most it may have. Close one, or poll GET /v1/jobs/{job_id}.",
                headers={"retry-after": format_retry_after(CAP_RETRY_AFTER)},
                limit=self.max_per_account,
            )
        if self._count >= self.max_streams:
            raise ProblemError(
                "rate-limited",
                f"This server has {self.max_streams} job event streams open, the most it "
                "serves. Retry after the number of seconds in Retry-After, or poll "
                f"GET /v1/jobs/{job_id}.",
                headers={"retry-after": format_retry_after(CAP_RETRY_AFTER)},
            )
        stream = Stream(account_id, job_id, after)
        self._streams.setdefault(job_id, set()).add(stream)
        self._accounts[account_id] += 1
        self._count += 1
        self._opening.append(stream)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=LOOP_NAME)
        return stream

    def close(self, stream: Stream) -> None:
        """Forget `stream` (once done with it, however it ended); a second call does nothing."""
        watching = self._streams.get(stream.job_id)
        if watching is None or stream not in watching:
            return
        watching.discard(stream)
        if not watching:
            del self._streams[stream.job_id]
        self._accounts[stream.account_id] -= 1
        if not self._accounts[stream.account_id]:
            del self._accounts[stream.account_id]
        self._count -= 1

    async def stop(self) -> None:
        """End every stream and the loop (the reader stays open: its owner disposes of it)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for watching in self._streams.values():
            for stream in watching:
                stream._hand(ended=True)

    async def _run(self) -> None:
        next_full, failing = 0.0, False
        while self._streams:
            self._wake.clear()
            opening, self._opening = self._opening, []
            now = time.monotonic()
            full = now >= next_full
            if full:
                next_full = now + self.interval
            try:
                opened = [s for s in opening if self._watched(s)]
                if await self._read(opened, full=full):
                    next_full = time.monotonic()  # more to read: go on at once
            except Exception as exc:
                if not failing:
                    log.warning("reading watched jobs failed (%s); retrying", type(exc).__name__)
                failing = True
                for stream in opening:
                    stream._fail(exc)
            else:
                failing = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, next_full - time.monotonic()))

    def _watched(self, stream: Stream) -> bool:
        return stream in self._streams.get(stream.job_id, ())

    async def _read(self, opening: list[Stream], *, full: bool) -> bool:
        """Open the `opening` streams, then hand every stream of a job that changed (of every
        watched job when `full`, else only of those just opened) its new events; whether some
        job has more than one read takes."""
        found = {
            job.id: job
            for job in await self._store.jobs_by_id(self.reader, {s.job_id for s in opening})
        }
        versions = {job.id: (job.status, job.version) for job in found.values()}
        for stream in opening:
            job = found.get(stream.job_id)
            if job is None or job.account_id != stream.account_id:
                stream._hand(ended=True)
                stream._opened(False)
                continue
            stream.seen = min(stream.after, job.version)
            if stream.seen < 1:
                stream.seen = 1
                stream._hand([JobEvent.created(job)])
            stream._hand(ended=job.status in states.FINAL and stream.seen >= job.version)
            stream._opened(True)
        if full:
            rest = set(self._streams) - set(versions)
            versions.update(await self._store.versions(self.reader, rest))
            for job_id in rest - set(versions):  # deleted (purged): nothing more will come
                for stream in self._streams[job_id]:
                    stream._hand(ended=True)
        return await self._catch_up(versions)

    async def _catch_up(self, versions: dict[str, tuple[str, int]]) -> bool:
        """Hand each stream the events of its job after the last it got, up to the version read
        (at most `WINDOW` versions on); whether some job has more."""
        behind = False
        floors: dict[str, int] = {}
        for job_id, (_, version) in versions.items():
            seen = [s.seen for s in self._streams.get(job_id, ()) if s.seen is not None]
            if seen and min(seen) < version:
                floors[job_id] = min(seen)
        chunks = list(floors.items())
        for start in range(0, len(chunks), EVENT_BATCH):
            chunk = chunks[start : start + EVENT_BATCH]
            read: dict[str, list[JobEvent]] = {job_id: [] for job_id, _ in chunk}
            for event in await self._store.events_within(self.reader, dict(chunk), window=WINDOW):
                read[event.job_id].append(event)
            for job_id, floor in chunk:
                status, version = versions[job_id]
                events = read[job_id]
                if version > floor + WINDOW:
                    covered, behind = floor + WINDOW, True
                else:
                    covered = max([version, *(e.version for e in events)])
                for stream in self._streams.get(job_id, ()):
                    if stream.seen is None or stream.seen >= covered:
                        continue
                    new = [e for e in events if e.version > stream.seen]
                    stream.seen = covered
                    final = any(e.status in states.FINAL for e in new) or (
                        status in states.FINAL and covered >= version
                    )
                    stream._hand(new, ended=final)
        return behind
