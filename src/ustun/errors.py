"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    InvalidSignature,
    MissingHeaders,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ProblemError,
    SignatureError,
    StateConflictError,
    TimestampOutOfRange,
    UstunError,
)

__all__ = [
    "InvalidSignature",
    "MissingHeaders",
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "SignatureError",
    "StateConflictError",
    "TimestampOutOfRange",
    "UstunError",
]
