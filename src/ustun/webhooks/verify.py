"""`verify`: the one call a webhook receiver needs before it trusts a body."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ustun.http.errors import InvalidSignature
from ustun.http.signature import DEFAULT_TOLERANCE, Secret
from ustun.http.signature import verify as verify_signature


def verify(
    secret: Secret | str | Iterable[Secret | str],
    headers: Mapping[str, str],
    raw_body: bytes,
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """The event in `raw_body` once its Standard Webhooks signature checks out.

    Pass the body exactly as received (bytes, before any JSON parsing). Raises
    `MissingHeaders`, `TimestampOutOfRange` or `InvalidSignature` (all `SignatureError`).
    """
    verify_signature(secret, headers, raw_body, tolerance=tolerance)
    try:
        event = json.loads(raw_body)
    except ValueError:
        raise InvalidSignature("the signed body is not JSON") from None
    if not isinstance(event, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return event
