"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    ApiError,
    ClientError,
    InvalidSignature,
    MissingHeaders,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ProblemError,
    RetriesExhausted,
    SignatureError,
    StateConflictError,
    TimestampOutOfRange,
    UpdateConflict,
    UstunError,
    WaitTimeout,
)

__all__ = [
    "ApiError",
    "ClientError",
    "InvalidSignature",
    "MissingHeaders",
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "RetriesExhausted",
    "SignatureError",
    "StateConflictError",
    "TimestampOutOfRange",
    "UpdateConflict",
    "UstunError",
    "WaitTimeout",
]
