"""The public face of ustun's exception tree (defined in `ustun.http.errors`, the bottom layer)."""

from ustun.http.errors import ProblemError, UstunError

__all__ = ["ProblemError", "UstunError"]
