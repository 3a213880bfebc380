"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    IllegalTransition,
    InvalidSignature,
    JobCancelled,
    JobInterrupted,
    LeaseLost,
    MissingHeaders,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ProblemError,
    SignatureError,
    StateConflictError,
    TimestampOutOfRange,
    TransientError,
    UstunError,
)

__all__ = [
    "IllegalTransition",
    "InvalidSignature",
    "JobCancelled",
    "JobInterrupted",
    "LeaseLost",
    "MissingHeaders",
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "SignatureError",
    "StateConflictError",
    "TimestampOutOfRange",
    "TransientError",
    "UstunError",
]
