"""Idle driver connections for hot statements that run ONE statement outside any transaction.

A lone enqueue or a worker's claim needs neither a transaction nor SQLAlchemy's statement
machinery: the statement commits by itself. Checking out a SQLAlchemy connection for it costs
more CPU than the statement (greenlet hops, pool events, reset on return), and asyncpg's own
pool resets every connection on release in a shielded task; this keeps a plain LIFO of idle
connections instead, which is safe because no statement run here leaves session state behind.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiosqlite
import asyncpg

# SQLSTATEs of an error after which the server closes the connection (Appendix A): a
# connection exception, an operator intervention (shutdown, crash, restart).
_ENDS_CONNECTION = ("08", "57P")
# A graceful close waits this long for the server's goodbye, then drops the socket: a server
# that went away mid-close must not hold up a shutdown.
_CLOSE_TIMEOUT = 5.0


class AutocommitPool:
    """At most `size` asyncpg connections to `dsn`, each lent to one statement at a time.

    `server_settings` are set on each connection as it opens (timeouts, say).
    """

    def __init__(
        self, dsn: str, size: int, *, server_settings: Mapping[str, str] | None = None
    ) -> None:
        self._dsn = dsn
        self._server_settings = dict(server_settings or {})
        self._slots = asyncio.Semaphore(size)
        self._idle: list[asyncpg.Connection] = []
        self._generation = 0  # bumped by close(): connections made before it are not reused

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """An idle connection that is still open (a new one if none is), returned when the
        block ends.

        An error the server answered leaves the connection ready for the next statement, but
        for one that ends the connection (a shutdown, a broken link: SQLSTATE 57P0x, 08xxx),
        whose socket may not look closed yet: that one is let go, as is one after any other
        exception (a cancellation mid-statement may leave it in an unknown protocol state).
        An idle connection the server has closed since (a restart) is let go unused.
        """
        async with self._slots:
            generation = self._generation
            conn = self._open_idle() or await self._connect()
            try:
                yield conn
            except asyncpg.PostgresError as error:
                if str(error.sqlstate).startswith(_ENDS_CONNECTION):
                    conn.terminate()
                else:
                    self._give_back(conn, generation)
                raise
            except BaseException:
                conn.terminate()
                raise
            self._give_back(conn, generation)

    def _open_idle(self) -> asyncpg.Connection | None:
        """The most recently used idle connection still open; closed ones are let go."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            conn.terminate()
        return None

    async def _connect(self) -> asyncpg.Connection:
        """A new connection that reads and writes JSON as SQLAlchemy's asyncpg dialect does:
        parameters already serialised, results parsed."""
        conn = await asyncpg.connect(self._dsn, server_settings=self._server_settings)
        try:
            for name in ("json", "jsonb"):
                await conn.set_type_codec(
                    name, schema="pg_catalog", encoder=str, decoder=json.loads, format="text"
                )
        except BaseException:
            conn.terminate()
            raise
        return conn

    def _give_back(self, conn: asyncpg.Connection, generation: int) -> None:
        if generation != self._generation:
            conn.terminate()
        elif not conn.is_closed():
            self._idle.append(conn)

    async def close(self) -> None:
        """Close every connection: idle ones now, lent ones when their block ends.

        Like SQLAlchemy's `dispose()`, it does not end the pool: later blocks connect anew.
        """
        self._generation += 1
        idle, self._idle = self._idle, []
        await asyncio.gather(
            *(conn.close(timeout=_CLOSE_TIMEOUT) for conn in idle), return_exceptions=True
        )


class SqliteReaders:
    """At most `size` aiosqlite connections in autocommit mode, each lent to one read at a time.

    A read off SQLAlchemy's pool is one hand-off to the connection's thread, where a checkout
    through SQLAlchemy costs a greenlet hop and pool events besides; each statement is its own
    snapshot, as `Database.read()` gives. A cancelled read leaves nothing open: aiosqlite runs
    the statement to its end in its thread, so the connection is reused.
    """

    def __init__(self, path: str, size: int, busy_timeout_ms: int) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._slots = asyncio.Semaphore(size)
        self._idle: list[aiosqlite.Connection] = []
        self._generation = 0

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[aiosqlite.Connection]:
        """An idle reader (a new one if none is idle), returned when the block ends."""
        async with self._slots:
            generation = self._generation
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                yield conn
            finally:
                if generation == self._generation:
                    self._idle.append(conn)
                else:
                    await conn.close()

    async def _connect(self) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self._path, isolation_level=None)
        await conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
        return conn

    async def close(self) -> None:
        """Close every idle reader now and lent ones when their block ends."""
        self._generation += 1
        idle, self._idle = self._idle, []
        await asyncio.gather(*(conn.close() for conn in idle), return_exceptions=True)
