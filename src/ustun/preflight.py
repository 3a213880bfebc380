"""What every command checks before it changes anything, and the message for each mistake.

A configuration mistake becomes a `ConfigError` (or the `SchemaOutOfDate` / `SecretKeyError`
that `store.migrate` / `webhooks.secretbox` raise): one or two lines naming the setting and
the fix, never a secret's value. `ustun.cli.main` prints them and exits with `EXIT_CONFIG`.
"""

from __future__ import annotations

import errno
import socket

from pydantic import ValidationError

from ustun.http.errors import ConfigError, SchemaOutOfDate, SecretKeyError
from ustun.settings import Settings
from ustun.store.reach import reach, reason

EXIT_CONFIG = 2


REFUSALS = (ConfigError, SchemaOutOfDate, SecretKeyError)
# `reach` is one of the checks, kept with the store for its driver-specific messages.
__all__ = ["EXIT_CONFIG", "REFUSALS", "listen_socket", "load_settings", "reach"]


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
