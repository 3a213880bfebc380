"""One limit on every request body (`USTUN_MAX_BODY`): 413 `payload-too-large` above it.

The plumbing (`pipeline.Plumbing`) refuses a declared Content-Length above the limit before a
byte of the body is read; a body without one (chunked) is counted as it arrives and reading
stops at the limit, so the application never holds more than the limit of it.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException

from ustun.errors import UstunError


class BodyTooLarge(HTTPException, UstunError):
    """Raised by `receive` past the limit; an HTTPException, so FastAPI's body reading and the
    error handlers pass it on as the 413 (any other error there would become a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"The request body is larger than {limit} bytes, the most this server accepts."
        )
