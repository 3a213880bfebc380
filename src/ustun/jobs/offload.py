"""CPU-heavy job steps in a separate process, so they never hold the worker's event loop.

A step that computes for seconds (a PDF of thousands of rows) would stop every request and
heartbeat of its process; a thread would not help, as pure Python holds the GIL. The runner
keeps one `Offload`: a `ProcessPoolExecutor` of a few processes (one by default), started on
first use as fresh interpreters (spawn: no event loop or connection is forked, and starting one
does not wait on the event loop while it imports), at a lower CPU priority than the process
that serves requests, and stopped with the runner. A step abandoned while it runs (its job's
lease was lost, the worker stops) has its process killed, so no result of it outlives the run.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar, TypeVarTuple

R = TypeVar("R")
Ts = TypeVarTuple("Ts")

# How much lower the CPU priority of a step is than the worker's (nice(2) increment).
NICENESS = 10


def _lower_priority() -> None:
    """In each pool process: let the kernel prefer the processes serving requests."""
    if hasattr(os, "nice"):
        os.nice(NICENESS)


class Offload:
    """Runs functions in a pool of `processes` worker processes, created on first use."""

    def __init__(self, processes: int = 1) -> None:
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        # Pools killed by `_stop`: a call of one that breaks is run again, on the next pool.
        self._stopped: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()

    async def run(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        """`fn(*args)` in a pool process (`fn` and its arguments must pickle); cancelling the
        call kills the process that runs it."""
        while True:
            pool = self._current()
            future = pool.submit(fn, *args)
            try:
                return await asyncio.wrap_future(future)
            except BrokenProcessPool:
                if pool in self._stopped:
                    continue  # killed to stop another of its calls: this one runs again
                if self._pool is pool:
                    self._pool = None  # a process of it died (out of memory?): start afresh
                raise
            except asyncio.CancelledError:
                if not future.cancel() and not future.done():  # a process has it already
                    self._stop(pool)
                raise

    def close(self) -> None:
        """Stop the processes now (whatever still runs there was abandoned by its job) and
        wait for the pool to wind down, which releases its queues' semaphores: a process that
        exits by its signal (`ustun serve` on SIGTERM) would otherwise leave them to the
        resource tracker, which warns of leaked semaphores."""
        if self._pool is not None:
            self._stop(self._pool, wait=True)

    def _current(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority,
            )
        return self._pool

    def _stop(self, pool: ProcessPoolExecutor, *, wait: bool = False) -> None:
        """Kill `pool`'s processes (`terminate_workers` from Python 3.14 on) and shut it down
        (`wait`: until its thread has joined them); the next call starts a new pool."""
        if self._pool is pool:
            self._pool = None
        if pool in self._stopped:
            return
        self._stopped.add(pool)
        for process in list(pool._processes.values()):
            process.kill()
        pool.shutdown(wait=wait, cancel_futures=True)
