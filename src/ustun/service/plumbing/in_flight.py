"""A per-account cap on requests in progress: one account's backlog waits in its own queue.

The request rate (`admission.RequestRate`) counts requests, not what they cost: a page of 100
rows, a transfer waiting on a row lock or a 1 MiB upload counts as one cheap GET does. Capping
how many of one account's requests run at once bounds what that account holds of the event
loop, the CPU and the connection pools whatever its requests cost, so another account's
requests never queue behind its backlog.
"""

from __future__ import annotations

import asyncio
from collections import deque


class AccountSlots:
    """At most `limit` slots held per account at once; each account's waiters are served in
    the order they came, and an account's waiters never wait for another account's slots."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def held(self, account: str) -> int:
        """Slots `account` holds now."""
        return self._held.get(account, 0)

    def waiting(self, account: str) -> int:
        """`account`'s requests waiting for a slot now."""
        return len(self._waiting.get(account, ()))

    async def acquire(self, account: str) -> None:
        """Wait for a slot of `account`'s; pair with one `release(account)`."""
        held = self._held.get(account, 0)
        if held < self.limit and account not in self._waiting:
            self._held[account] = held + 1
            return
        waiter = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(account, deque())
        queue.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(account)  # granted as it was cancelled: pass the slot on
            else:
                queue.remove(waiter)
                if not queue:
                    del self._waiting[account]
            raise

    def release(self, account: str) -> None:
        """Give back a slot of `account`'s, to its next waiter if it has one."""
        queue = self._waiting.get(account)
        while queue:
            waiter = queue.popleft()
            if not queue:
                del self._waiting[account]
            if not waiter.done():  # a cancelled waiter forgets itself when it resumes
                waiter.set_result(None)
                return
        held = self._held[account] - 1
        if held:
            self._held[account] = held
        else:
            del self._held[account]
