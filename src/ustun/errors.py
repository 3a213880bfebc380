"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    IllegalTransition,
    JobCancelled,
    JobInterrupted,
    LeaseLost,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ProblemError,
    StateConflictError,
    TransientError,
    UstunError,
)

__all__ = [
    "IllegalTransition",
    "JobCancelled",
    "JobInterrupted",
    "LeaseLost",
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "StateConflictError",
    "TransientError",
    "UstunError",
]
