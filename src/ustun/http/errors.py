"""The ustun exception tree (pure: every layer may raise these; `ustun.errors` re-exports them).

UstunError
├── ProblemError            an RFC 9457 problem: raised by handlers, rendered as problem+json
└── SignatureError          a webhook failed Standard Webhooks verification
    ├── MissingHeaders      webhook-id, webhook-timestamp or webhook-signature absent/malformed
    ├── TimestampOutOfRange webhook-timestamp further from now than the tolerance
    └── InvalidSignature    no signature matches any of the secrets
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


class SignatureError(UstunError):
    """A webhook could not be verified; never process its body."""


class MissingHeaders(SignatureError):
    """A Standard Webhooks header is absent or malformed."""


class TimestampOutOfRange(SignatureError):
    """`webhook-timestamp` is older or newer than the tolerance allows (replay protection)."""


class InvalidSignature(SignatureError):
    """No `v1` signature in `webhook-signature` matches the body under the secret."""
