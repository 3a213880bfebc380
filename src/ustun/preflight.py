"""What every command checks before it changes anything, and the message for each mistake.

A configuration mistake becomes a `ConfigError` (or the `SchemaOutOfDate` / `SecretKeyError`
that `store.migrate` / `webhooks.secretbox` raise): one or two lines naming the setting and
the fix, never a secret's value. `ustun.cli.main` prints them and exits with `EXIT_CONFIG`.
"""

from __future__ import annotations

import errno
import socket
import sqlite3

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from ustun.http.errors import ConfigError, SchemaOutOfDate, SecretKeyError
from ustun.settings import Settings
from ustun.store import Database

EXIT_CONFIG = 2
_PG_DEFAULT_PORT = 5432
# SQLSTATEs of a refused connection (PostgreSQL Appendix A): no such database, who you are.
_NO_SUCH_DATABASE = "3D000"
_AUTH_FAILED = ("28000", "28P01")


REFUSALS = (ConfigError, SchemaOutOfDate, SecretKeyError)


def load_settings(**overrides: object) -> Settings:
    """The settings from the environment, plus command-line `overrides` that are not None."""
    try:
        settings = Settings()
    except ValidationError as exc:
        raise ConfigError(_invalid_settings(exc)) from None
    return settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def _invalid_settings(exc: ValidationError) -> str:
    """Each invalid variable and what it must be; pydantic's own text would echo the value."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        name = f"USTUN_{str(error['loc'][0]).upper()}" if error["loc"] else "a USTUN_ setting"
        problems.append(f"{name} is invalid: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems) + ". Fix it in the environment."


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
            f"cannot open the SQLite database {url.database} ({_reason(exc)}): its directory "
            f"must exist and be writable; {fix}"
        )
    where = f"PostgreSQL at {url.host or 'localhost'}:{url.port or _PG_DEFAULT_PORT}"
    if not isinstance(exc, DBAPIError):
        return f"cannot connect to {where} ({_reason(exc)}): start it there, or {fix}"
    state = getattr(exc.orig, "sqlstate", None)
    if state == _NO_SUCH_DATABASE:
        return f"database {url.database!r} does not exist on {where}: create it, or {fix}"
    if state in _AUTH_FAILED:
        return f"{where} refused user {url.username!r} ({exc.orig}): {fix}"
    return f"{where} refused the connection ({exc.orig}): {fix}"


def _reason(exc: OSError | DBAPIError | sqlite3.Error) -> str:
    if isinstance(exc, DBAPIError):
        return str(exc.orig)
    if isinstance(exc, sqlite3.Error):
        return str(exc)
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return exc.strerror or str(exc).splitlines()[0]


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` (bound before anything is created, so a clash is early)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is in use: choose another with --port or USTUN_PORT"
            ) from None
        if exc.errno == errno.EACCES:
            raise ConfigError(
                f"no permission to listen on port {port}: choose one above 1023 with --port "
                "or USTUN_PORT"
            ) from None
        raise ConfigError(
            f"cannot listen on {host}:{port} ({_reason(exc)}): choose another address with "
            "--host or USTUN_HOST"
        ) from None
