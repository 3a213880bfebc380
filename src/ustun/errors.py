"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    ApiError,
    ClientError,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ProblemError,
    RetriesExhausted,
    StateConflictError,
    UpdateConflict,
    UstunError,
    WaitTimeout,
)

__all__ = [
    "ApiError",
    "ClientError",
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "RetriesExhausted",
    "StateConflictError",
    "UpdateConflict",
    "UstunError",
    "WaitTimeout",
]
