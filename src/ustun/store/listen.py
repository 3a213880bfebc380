"""Waking idle loops: in-process by a `Doorbell`, across processes by PostgreSQL `LISTEN`.

A loop that sleeps until there is work subscribes an `asyncio.Event` to its pillar's doorbell
(rung after a commit in this process) and, on PostgreSQL, runs a `Listener` on the channel its
pillar NOTIFYs. Polling stays the fallback, so a lost notification only ever delays work by one
poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

log = logging.getLogger("ustun.store")

RECONNECT_DELAY = 1.0
# What a lost listening connection raises.
LOST = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)

ConnectionHook = Callable[[asyncpg.Connection], Awaitable[None]]


class Doorbell:
    """Fan-out of "there is new work" to every subscribed loop of this process."""

    def __init__(self) -> None:
        self._listeners: set[asyncio.Event] = set()

    def subscribe(self, event: asyncio.Event) -> None:
        """Set `event` on every ring until `unsubscribe`."""
        self._listeners.add(event)

    def unsubscribe(self, event: asyncio.Event) -> None:
        """Stop setting `event`."""
        self._listeners.discard(event)

    def ring(self) -> None:
        """Wake every subscribed loop."""
        for event in tuple(self._listeners):
            event.set()


class Listener:
    """A dedicated connection LISTENing on `channel`, reconnecting after it is lost.

    `notified()` is called on every notification, and once after every (re)connect: anything
    sent while nothing listened is then looked for. `on_connect` runs on each new connection
    before that; `on_close` on a connection about to be closed (both under the connection's
    lock, which `connection()` also takes).
    """

    def __init__(
        self,
        dsn: str,
        channel: str,
        notified: Callable[[], None],
        *,
        on_connect: ConnectionHook | None = None,
        on_close: ConnectionHook | None = None,
    ) -> None:
        self._dsn = dsn
        self._channel = channel
        self._notified = notified
        self._on_connect = on_connect
        self._on_close = on_close
        self._conn: asyncpg.Connection | None = None
        self._using = asyncio.Lock()  # one statement at a time on the connection

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection | None]:
        """The listening connection (None while disconnected), for one statement at a time."""
        async with self._using:
            yield self._conn

    async def run(self, stopping: asyncio.Event) -> None:
        """LISTEN until `stopping` is set, reconnecting after a lost connection."""

        def on_notify(*_: object) -> None:
            self._notified()

        while not stopping.is_set():
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn)
                closed = asyncio.Event()
                conn.add_termination_listener(lambda _conn, closed=closed: closed.set())
                await conn.add_listener(self._channel, on_notify)
                if self._on_connect is not None:
                    await self._on_connect(conn)
                self._conn = conn
                self._notified()  # anything sent while we were not listening
                waiters = [asyncio.create_task(closed.wait()), asyncio.create_task(stopping.wait())]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
            except LOST as exc:
                log.warning(
                    "listener on %s disconnected (%s); polling until it reconnects",
                    self._channel,
                    exc,
                )
            finally:
                async with self._using:
                    self._conn = None
                    if conn is not None:
                        if self._on_close is not None:
                            with contextlib.suppress(Exception):
                                await self._on_close(conn)
                        with contextlib.suppress(Exception):
                            await conn.close(timeout=2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), RECONNECT_DELAY)
