"""What every command checks before it changes anything, and the message for each mistake.

A configuration mistake becomes a `ConfigError` (or the `SecretKeyError` that
`webhooks.secretbox` raises): one or two lines naming the setting and the fix, never a secret's
value, and exit code `EXIT_CONFIG`. A database whose schema is out of date (`SchemaOutOfDate`,
from `store.migrate`) is no mistake of configuration: its exit code is `EXIT_REFUSED`.
`ustun.cli.main` prints them and exits with `exit_code`.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from ustun.errors import ConfigError, SchemaOutOfDate, SecretKeyError, UstunError
from ustun.settings import Settings
from ustun.store.reach import reach, reason

EXIT_REFUSED = 1
EXIT_CONFIG = 2


REFUSALS = (ConfigError, SchemaOutOfDate, SecretKeyError)
# `reach` is one of the checks, kept with the store for its driver-specific messages.
__all__ = [
    "EXIT_CONFIG",
    "EXIT_REFUSED",
    "REFUSALS",
    "database_file",
    "exit_code",
    "listen_socket",
    "load_settings",
    "reach",
    "shown_url",
]


def exit_code(refusal: UstunError) -> int:
    """The exit code for one of the `REFUSALS`."""
    return EXIT_REFUSED if isinstance(refusal, SchemaOutOfDate) else EXIT_CONFIG


def load_settings(**options: Any) -> Settings:
    """The settings from the environment, where command-line `options` that are not None win;
    both are validated alike, and a mistake names the option or the variable it came from."""
    given = {name: value for name, value in options.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise ConfigError(_invalid_settings(exc, given)) from None


def _invalid_settings(exc: ValidationError, options: dict[str, Any]) -> str:
    """Each invalid option or variable and what it must be; pydantic's own text would echo the
    value (a secret, perhaps)."""
    problems = []
    from_environment = False
    for error in exc.errors(include_input=False, include_url=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        if field in options:
            name = "--" + field.replace("_", "-")
        else:
            name = f"USTUN_{field.upper()}" if field else "a USTUN_ setting"
            from_environment = True
        problems.append(f"{name} is invalid: {error['msg'].removeprefix('Value error, ')}")
    fix = " Fix it in the environment." if from_environment else ""
    return "; ".join(problems) + "." + fix


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite database URL, absolute (None: another database, or in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).resolve()


def shown_url(url: str) -> str:
    """The database URL to show: its password masked, a SQLite file's path made absolute."""
    path = _sqlite_file(url)
    parsed = make_url(url) if path is None else make_url(url).set(database=str(path))
    return parsed.render_as_string(hide_password=True)


def database_file(url: str, *, create: bool) -> None:
    """Refuse a SQLite file that is not there, unless this command makes it (`create`); checked
    before anything opens it, as opening a SQLite file creates it."""
    path = _sqlite_file(url)
    if path is None or path.exists() or not path.parent.is_dir():
        return  # not SQLite, there, or `reach` says what is wrong with its directory
    if not create:
        raise ConfigError(
            f"no SQLite database at {path}: run `ustun migrate` (or `ustun serve`) to create "
            "it, or fix USTUN_DATABASE_URL"
        )


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
            f"cannot listen on {host}:{port} ({reason(exc)}): choose another address with "
            "--host or USTUN_HOST"
        ) from None
