"""The ustun exception tree (pure: every layer may raise these; `ustun.errors` re-exports them).

UstunError
└── ProblemError    an RFC 9457 problem: raised by handlers, rendered as problem+json
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class UstunError(Exception):
    """Base of every exception ustun raises on purpose."""


class ProblemError(UstunError):
    """A failure with a problem type: `slug` from the catalogue, a `detail` for the caller."""

    def __init__(
        self,
        slug: str,
        detail: str,
        *,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.slug = slug
        self.detail = detail
        self.status = status
        self.headers = dict(headers or {})
        self.extensions = extensions
