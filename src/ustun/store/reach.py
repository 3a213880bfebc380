"""Whether the database can be reached: a one-line message naming the fix when it cannot be
at start, and what an error met while serving says about it (`outage`).

`ustun.preflight` runs `reach` before any command changes anything; both live here because what
a refusal means depends on the driver (SQLite's file and result codes, PostgreSQL's SQLSTATE).
"""

from __future__ import annotations

import errno
import os
import socket
import sqlite3
import sys
from typing import Literal, NamedTuple

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

from ustun.errors import ConfigError
from ustun.store.engine import Database

_PG_DEFAULT_PORT = 5432
# SQLSTATEs of a refused connection (PostgreSQL Appendix A): no such database, who you are.
_NO_SUCH_DATABASE = "3D000"
_AUTH_FAILED = ("28000", "28P01")


async def reach(db: Database) -> None:
    """Open one connection, so that a database that is not there is reported as such.

    SQLite is opened with the standard driver: aiosqlite's thread outlives a failed connect
    and prints a traceback once the event loop has closed.
    """
    try:
        if db.is_sqlite:
            sqlite3.connect(make_url(db.url).database or ":memory:").close()
        else:
            async with db.engine.connect():
                pass
    except (OSError, DBAPIError, sqlite3.Error) as exc:
        raise ConfigError(_unreachable(db, exc)) from None


def _unreachable(db: Database, exc: OSError | DBAPIError | sqlite3.Error) -> str:
    url = make_url(db.url)
    fix = "fix USTUN_DATABASE_URL"
    if db.is_sqlite:
        return (
            f"cannot open the SQLite database {url.database} ({reason(exc)}): its directory "
            f"must exist and be writable; {fix}"
        )
    where = f"PostgreSQL at {url.host or 'localhost'}:{url.port or _PG_DEFAULT_PORT}"
    if not isinstance(exc, DBAPIError):
        return f"cannot connect to {where} ({reason(exc)}): start it there, or {fix}"
    state = getattr(exc.orig, "sqlstate", None)
    if state == _NO_SUCH_DATABASE:
        return f"database {url.database!r} does not exist on {where}: create it, or {fix}"
    if state in _AUTH_FAILED:
        return f"{where} refused user {url.username!r} ({exc.orig}): {fix}"
    return f"{where} refused the connection ({exc.orig}): {fix}"


def reason(exc: OSError | DBAPIError | sqlite3.Error) -> str:
    """Why a connection failed, in a few words."""
    if isinstance(exc, DBAPIError):
        return str(exc.orig)
    if isinstance(exc, sqlite3.Error):
        return str(exc)
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return exc.strerror or str(exc).splitlines()[0]


# The kinds of outage: down or unreachable; too slow to answer in time; out of disk space.
OutageKind = Literal["unavailable", "busy", "full"]


class Outage(NamedTuple):
    """What a database error says about the database, in a sentence a client can act on."""

    kind: OutageKind
    detail: str


# The problem answering each kind of outage, and how long a client should wait before its
# retry: a restart takes seconds, a timeout clears as the load does, a full disk needs an operator.
OUTAGE_PROBLEMS: dict[OutageKind, tuple[str, float]] = {
    "unavailable": ("database-unavailable", 2),
    "busy": ("database-busy", 1),
    "full": ("insufficient-storage", 60),
}

_UNAVAILABLE = Outage(
    "unavailable",
    "The database is unreachable or closed the connection (it may be restarting).",
)
_FULL = Outage("full", "The database's disk is full: it refused to store more.")
# SQLSTATEs (PostgreSQL Appendix A) that say something about the database rather than the
# statement: by exact code, else by class (two characters).
_PG_STATES: dict[str, Outage] = {
    "08": _UNAVAILABLE,  # connection exception
    "57P01": _UNAVAILABLE,  # admin_shutdown
    "57P02": _UNAVAILABLE,  # crash_shutdown
    "57P03": _UNAVAILABLE,  # cannot_connect_now (starting up, shutting down)
    "53300": Outage("unavailable", "The database has as many connections as it allows."),
    "53100": _FULL,  # disk_full
    "57014": Outage("busy", "A database statement ran past USTUN_STATEMENT_TIMEOUT."),
    "55P03": Outage(
        "busy", "The request waited past USTUN_LOCK_TIMEOUT for a row another request holds."
    ),
    "40P01": Outage("busy", "The request's transaction was chosen to break a deadlock."),
    "40001": Outage("busy", "The request's transaction conflicted with a concurrent one."),
}
# SQLite's primary result codes that say something about the database.
_SQLITE_CODES: dict[int, Outage] = {
    sqlite3.SQLITE_FULL: _FULL,
    sqlite3.SQLITE_BUSY: Outage(
        "busy", "The database stayed locked by another writer past its busy timeout."
    ),
    sqlite3.SQLITE_CANTOPEN: Outage("unavailable", "The database file could not be opened."),
}
# What asyncpg says of a connection that was closed under it (by the server or the network).
_CLOSED_CONNECTION = ("connection is closed", "connection was closed")
_MAX_WRAPPERS = 4  # SQLAlchemy's error, its adapter's, the driver's, the OS's


def outage(exc: BaseException) -> Outage | None:
    """The outage an exception from the database path shows, or None for any other error.

    Looks through the driver errors SQLAlchemy and its adapters wrap (`orig`, `__cause__`).
    A full disk is an outage wherever it is met: SQLITE_FULL, SQLSTATE 53100, ENOSPC.
    """
    seen: BaseException | None = exc
    for _ in range(_MAX_WRAPPERS):
        if seen is None:
            return None
        found = _outage_of(seen)
        if found is not None:
            return found
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


def _outage_of(exc: BaseException) -> Outage | None:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return _UNAVAILABLE
    if isinstance(exc, SQLAlchemyTimeoutError):
        return Outage("busy", "Every database connection of this server stayed busy.")
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        return _PG_STATES.get(state) or _PG_STATES.get(state[:2])
    if isinstance(exc, asyncpg.InterfaceError):
        return _UNAVAILABLE if any(s in str(exc) for s in _CLOSED_CONNECTION) else None
    psycopg = sys.modules.get("psycopg")  # not imported: not one of its errors
    if psycopg is not None and isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        found = _PG_STATES.get(state) or _PG_STATES.get(state[:2])
        # psycopg gives a refused or lost connection no SQLSTATE, only its class.
        closed = not state and isinstance(exc, psycopg.OperationalError)
        return _UNAVAILABLE if closed else found
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return None if code is None else _SQLITE_CODES.get(code & 0xFF)
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return _FULL
        return _UNAVAILABLE if isinstance(exc, ConnectionError | socket.gaierror) else None
    return None


def free_bytes(db: Database) -> int | None:
    """Bytes free for the database on the SQLite file's filesystem; None on PostgreSQL (its
    disk is the server's) or in memory."""
    path = make_url(db.url).database
    if not db.is_sqlite or not path or path == ":memory:":
        return None
    stats = os.statvfs(os.path.dirname(os.path.abspath(path)))
    return stats.f_bavail * stats.f_frsize
