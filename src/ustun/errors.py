"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ProblemError,
    StateConflictError,
    UstunError,
)

__all__ = [
    "NotFoundError",
    "PreconditionFailedError",
    "PreconditionRequiredError",
    "ProblemError",
    "StateConflictError",
    "UstunError",
]
