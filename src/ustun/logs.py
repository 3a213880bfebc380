"""Structured logs: one JSON object per line, carrying the id of the request being served.

The request id lives in a contextvar, so every record logged while a request is handled (by
the service or by any pillar) carries it without being passed around. Values that look like
API keys or webhook secrets are masked before a record is written.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any, TextIO

from ustun.defaults import DEFAULT_LOG_LEVEL

ACCESS_LOGGER = "ustun.access"  # one line per request, written by `ustun.service.observe`

_request_id: ContextVar[str | None] = ContextVar("ustun_request_id", default=None)

# `ustun_sk_…` API keys, `whsec_…` signing secrets, `whsk_…` ed25519 signing keys and bearer
# credentials: never written out.
_SECRET = re.compile(r"(ustun_sk_|whsec_|whsk_|(?i:bearer\s+))[A-Za-z0-9_+/=.-]+")

# Attributes every LogRecord has (and uvicorn's ANSI copy of its message); anything else on a
# record is an `extra` worth writing.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "color_message"}
)


def bind_request_id(request_id: str) -> Token[str | None]:
    """Mark the current context as serving `request_id`; pass the token to `reset_request_id`."""
    return _request_id.set(request_id)


def reset_request_id(token: Token[str | None]) -> None:
    """Leave the request context entered by `bind_request_id`."""
    _request_id.reset(token)


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return _request_id.get()


def redact(text: str) -> str:
    """`text` with anything shaped like an API key, secret or bearer token masked."""
    return _SECRET.sub(lambda m: m.group(1) + "***", text)


def _safe(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v) for v in value]
    return redact(str(value))


class JsonFormatter(logging.Formatter):
    """Format a record as one line of JSON: time, level, logger, message, request_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        request_id = getattr(record, "request_id", None) or current_request_id()
        if request_id is not None:
            entry["request_id"] = request_id
        if record.name == ACCESS_LOGGER and not record.exc_info:
            # One per request, with known extras (the route is a template, never client text):
            # skip the walk over every attribute of the record.
            extra = vars(record)
            entry.update(
                route=extra["route"], status=extra["status"], duration_ms=extra["duration_ms"]
            )
            return json.dumps(entry, ensure_ascii=False)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = _safe(value)
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(level: str = DEFAULT_LOG_LEVEL, stream: TextIO | None = None) -> None:
    """Send every log record of the process to `stream` (stderr) as JSON lines at `level`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The JSON line names no thread, process or source line: skip collecting them for every
    # record (the logging HOWTO's "Optimization" settings; 41 -> 30 µs per access line).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    # uvicorn brings handlers of its own; route its records through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Alembic announces its context on every schema check; only its warnings matter here.
    logging.getLogger("alembic").setLevel(logging.WARNING)
