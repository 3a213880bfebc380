"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import (
    InvalidSignature,
    MissingHeaders,
    ProblemError,
    SignatureError,
    TimestampOutOfRange,
    UstunError,
)

__all__ = [
    "InvalidSignature",
    "MissingHeaders",
    "ProblemError",
    "SignatureError",
    "TimestampOutOfRange",
    "UstunError",
]
