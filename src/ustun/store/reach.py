"""Whether the configured database can be reached, and a one-line message naming the fix if not.

`ustun.preflight` runs it before any command changes anything; it lives here because what a
refusal means depends on the driver (SQLite's file, PostgreSQL's SQLSTATE).
"""

from __future__ import annotations

import socket
import sqlite3

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from ustun.http.errors import ConfigError
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
