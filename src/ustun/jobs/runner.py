"""The job runner: a loop for the service `Worker` that claims, runs and settles jobs.

One loop per process claims batches up to its free slots (a job frees its slot when its
handler returns, so the next claim overlaps its settle), runs each job as a task, renews
the leases of running jobs by heartbeat, and returns expired leases of dead workers to the
queue. While claims find jobs it claims again after a short gather; once one comes back
empty it sleeps until woken (NOTIFY, an in-process enqueue, a slot freeing) or the poll
interval passes.

A run whose lease ends before a heartbeat renewed it (the database did not answer in time)
is abandoned then, as another worker may run the job now. CPU-heavy steps go to the
runner's worker processes (`JobContext.offload`), so they never hold up its heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from ustun import ids, tracing
from ustun.defaults import (
    DEFAULT_JOB_CONCURRENCY,
    DEFAULT_JOB_LEASE,
    DEFAULT_JOB_POLL_INTERVAL,
    DEFAULT_JOB_PROCESSES,
    DEFAULT_JOB_RETRY_BASE,
)
from ustun.errors import JobCancelled, LeaseLost, ProblemError
from ustun.http.backoff import TWENTY_PERCENT_JITTER, backoff
from ustun.http.problem import problem
from ustun.jobs import states, wakeup
from ustun.jobs.adapters import store_for
from ustun.jobs.context import JobContext
from ustun.jobs.offload import Offload
from ustun.jobs.records import Job
from ustun.jobs.registry import JobKind, Registry
from ustun.jobs.store import JobListener, Outcome
from ustun.store import Database

log = logging.getLogger("ustun.jobs")

RETRY_CAP = 3_600.0
SHUTDOWN_GRACE = 10.0
SETTLE_BATCH = 200
CLAIM_GATHER = 0.02


def retry_delay(attempt: int, base: float, cap: float = RETRY_CAP) -> float:
    """Exponential backoff with ±20 % jitter: base·2^(attempt-1), capped (jobs jitter around
    the delay rather than below it, as webhook retries do)."""
    return backoff(attempt, base=base, cap=cap, jitter=TWENTY_PERCENT_JITTER)


@dataclass
class _Running:
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    settling: bool = field(default=False)
    # Abandons the run when its lease ends; re-armed by each renewal.
    expiry: asyncio.TimerHandle | None = None


class Runner:
    """Runs jobs of the kinds in `kinds` with at most `concurrency` at once, their offloaded
    steps in `processes` worker processes."""

    def __init__(
        self,
        db: Database,
        *,
        kinds: Registry,
        concurrency: int = DEFAULT_JOB_CONCURRENCY,
        lease_seconds: float = DEFAULT_JOB_LEASE,
        poll_interval: float = DEFAULT_JOB_POLL_INTERVAL,
        retry_base: float = DEFAULT_JOB_RETRY_BASE,
        processes: int = DEFAULT_JOB_PROCESSES,
    ) -> None:
        self.db = db
        self.store = store_for(db)
        self.kinds = kinds
        self.concurrency = concurrency
        self.lease = lease_seconds
        self.poll_interval = poll_interval
        self.retry_base = retry_base
        self.worker_id = ids.new_id("wrk")
        self.offload = Offload(processes)
        self._running: dict[str, _Running] = {}
        self._wake = asyncio.Event()
        self._outcomes: list[tuple[Job, Outcome, asyncio.Future[Job | None]]] = []
        self._outcome_ready = asyncio.Event()
        self._listener: JobListener | None = None

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and run jobs until `stopping` is set, then let running jobs finish or release."""
        self._wake, self._outcome_ready = asyncio.Event(), asyncio.Event()
        wakeup.doorbell.subscribe(self._wake)
        helpers = [
            asyncio.create_task(self._heartbeat(stopping)),
            asyncio.create_task(self._wake_on(stopping)),
            asyncio.create_task(self._settler()),
        ]
        self._listener = self.store.listener(self.db, self._wake)
        if self._listener is not None:
            helpers.append(asyncio.create_task(self._listener.run(stopping)))
        try:
            await self._claim_loop(stopping)
        finally:
            wakeup.doorbell.unsubscribe(self._wake)
            await self._drain()
            self.offload.close()
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)

    async def _wake_on(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        self._wake.set()

    async def _claim_loop(self, stopping: asyncio.Event) -> None:
        recover_every = max(0.5, min(self.poll_interval, self.lease / 4))
        next_recovery = gather_until = 0.0
        while not stopping.is_set():
            self._wake.clear()
            if time.monotonic() >= next_recovery:
                next_recovery = time.monotonic() + recover_every
                async with self.db.unit_of_work() as uow:
                    await self.store.recover_expired(uow, hooks=self.kinds.final_hooks)
            wait = self.poll_interval
            free = self._free_slots()
            if free > 0:
                # The last claim emptied the queue: under a stream of enqueues let the next ones
                # gather into a batch rather than claim them one by one.
                if await _stopped_within(stopping, gather_until - time.monotonic()):
                    break
                free = self._free_slots()
                lease_ends = asyncio.get_running_loop().time() + self.lease
                claimed = await self.store.claim(
                    self.db,
                    worker_id=self.worker_id,
                    kinds=self.kinds.names(),
                    limit=free,
                    lease=self.lease,
                )
                for job in claimed:
                    self._start(job, lease_ends)
                if claimed and self._listener is not None:
                    # Jobs keep coming: the next claim follows a timer or a freed slot, no NOTIFY.
                    await self._listener.busy()
                if len(claimed) == free:
                    gather_until = 0.0
                    continue  # a full batch: more may be due, claim as soon as slots free
                gather_until = time.monotonic() + CLAIM_GATHER
                if claimed and self._listener is not None:
                    wait = CLAIM_GATHER
                elif self._listener is not None and await self._listener.idle():
                    gather_until = 0.0
                    continue  # now notified: claim what was enqueued before that
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def _free_slots(self) -> int:
        """Slots for new jobs: a job frees its slot when its handler returns, so the next claim
        overlaps its settle; at most `concurrency` jobs wait to settle on top of those running."""
        settling = sum(1 for r in self._running.values() if r.settling)
        running = len(self._running) - settling
        return min(self.concurrency - running, 2 * self.concurrency - len(self._running))

    def _start(self, job: Job, lease_ends: float) -> None:
        stale = self._running.get(job.id)
        if stale is not None and stale.task is not None:
            # Re-claimed here while an earlier run still goes on: that run lost its lease.
            stale.ctx.lost = True
            stale.task.cancel()
        running = _Running(JobContext(job, self.db, self.store, self.offload))
        self._running[job.id] = running
        running.task = asyncio.create_task(self._execute(running), name=f"job {job.id}")
        self._hold_until(running, lease_ends)

    def _hold_until(self, running: _Running, lease_ends: float) -> None:
        """Abandon the run at `lease_ends` (event loop time) unless a renewal comes first."""
        if running.expiry is not None:
            running.expiry.cancel()
        loop = asyncio.get_running_loop()
        running.expiry = loop.call_at(lease_ends, self._expired, running)

    def _expired(self, running: _Running) -> None:
        """The run's lease ended unrenewed: another worker may run the job now, so stop it."""
        if running.settling or running.task is None:
            return
        log.warning(
            "job %s: its lease ended before a heartbeat could renew it; run abandoned",
            running.ctx.job.id,
        )
        running.ctx.lost = True
        running.task.cancel()

    async def _execute(self, running: _Running) -> None:
        ctx = running.ctx
        job = ctx.job
        try:
            kind = self.kinds.get(job.kind)
            assert kind is not None, "claimed only registered kinds"
            outcome = await self._outcome(kind, ctx)
            running.settling = True
            self._wake.set()  # its slot is free: the next claim overlaps this settle
            if await self._settle(job, outcome) is None:
                raise LeaseLost(job.id)
        except LeaseLost:
            log.warning("job %s: lease lost; another worker owns it now", job.id)
        except asyncio.CancelledError:
            if not ctx.lost and not running.settling:
                # Shutting down: hand the job back at once rather than wait for its lease.
                with contextlib.suppress(Exception):
                    async with self.db.unit_of_work() as uow:
                        await self.store.finish(uow, job, Outcome(states.PENDING))
            raise
        except Exception:
            log.exception("job %s: could not record its outcome; its lease will expire", job.id)
        finally:
            if running.expiry is not None:
                running.expiry.cancel()
            # The same job may already run here again (re-claimed after this run lost it).
            if self._running.get(job.id) is running:
                del self._running[job.id]
            self._wake.set()

    async def _outcome(self, kind: JobKind, ctx: JobContext) -> Outcome:
        job = ctx.job
        try:
            # The run joins the trace of the request that enqueued the job.
            with tracing.span(
                "ustun.job.run",
                parent=job.traceparent,
                attributes={
                    "ustun.job.id": job.id,
                    "ustun.job.kind": job.kind,
                    "ustun.job.attempt": job.attempts,
                },
            ):
                result = await kind.handler(ctx)
        except JobCancelled:
            return Outcome(states.CANCELLED)
        except LeaseLost:
            raise
        except Exception as exc:
            error = _as_problem(exc, job)
            if isinstance(exc, kind.retry_on) and job.attempts < job.max_attempts:
                delay = retry_delay(job.attempts, self.retry_base)
                log.warning("job %s failed (%r); retry in %.1f s", job.id, exc, delay)
                return Outcome(states.PENDING, error=error, retry_in=delay)
            log.error("job %s failed for good", job.id, exc_info=exc)
            return Outcome(states.FAILED, error=error)
        return Outcome(states.DONE, result=result)

    def _settle(self, job: Job, outcome: Outcome) -> asyncio.Future[Job | None]:
        """Queue an outcome for the settler, which commits whatever is queued in one go."""
        settled: asyncio.Future[Job | None] = asyncio.get_running_loop().create_future()
        self._outcomes.append((job, outcome, settled))
        self._outcome_ready.set()
        return settled

    async def _settler(self) -> None:
        """Record queued outcomes a batch per transaction: jobs ending together share a commit."""
        while True:
            await self._outcome_ready.wait()
            await asyncio.sleep(0)  # let jobs finishing in this same tick join the batch
            self._outcome_ready.clear()
            batch, self._outcomes = self._outcomes[:SETTLE_BATCH], self._outcomes[SETTLE_BATCH:]
            if self._outcomes:
                self._outcome_ready.set()
            try:
                held = [job for job, _, _ in batch]
                settled = await self.store.settle(
                    self.db,
                    [(job, outcome) for job, outcome, _ in batch],
                    hooks=self.kinds.final_hooks_for(held),
                )
            except Exception as exc:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for job, _, future in batch:
                if not future.done():
                    future.set_result(settled[job.id])

    async def _heartbeat(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.lease / 3)
            await self._renew()

    async def _renew(self) -> None:
        held = {job_id: r for job_id, r in self._running.items() if not r.settling}
        if not held:
            return
        lease_ends = asyncio.get_running_loop().time() + self.lease
        try:
            alive = await self.store.renew(
                self.db, worker_id=self.worker_id, job_ids=list(held), lease=self.lease
            )
        except Exception:
            log.exception("could not renew job leases; retrying at the next heartbeat")
            return
        for job_id, running in held.items():
            if running.settling or self._running.get(job_id) is not running:
                continue  # it settles, or its run ended while the renewal waited
            if job_id not in alive:
                running.ctx.lost = True
                if running.task is not None:
                    running.task.cancel()
                continue
            self._hold_until(running, lease_ends)
            if alive[job_id]:
                running.ctx.cancel_requested = True

    async def _drain(self) -> None:
        """On shutdown: give running jobs a grace period, then stop them (their leases lapse)."""
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def _stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` (if positive); whether `stopping` is set."""
    if seconds > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


def _as_problem(exc: Exception, job: Job) -> dict[str, object]:
    if isinstance(exc, ProblemError):
        with contextlib.suppress(ValueError):
            return problem(exc.slug, exc.detail, status=exc.status, **exc.extensions)
    return problem(
        "job-failed",
        f"{type(exc).__name__} on attempt {job.attempts} of {job.max_attempts}; "
        "the worker's log has the details.",
    )
