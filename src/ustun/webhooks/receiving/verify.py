"""`verify`: the one call a webhook receiver needs before it trusts a body."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ustun.defaults import DEFAULT_SIGNATURE_TOLERANCE
from ustun.errors import InvalidSignature, RepeatedHeaders
from ustun.http.signature import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Verifier,
)
from ustun.http.signature import verify as verify_signature

WEBHOOK_HEADERS = (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A verified delivery: the `webhook-id` and timestamp that were signed, and the event."""

    id: str
    timestamp: int
    event: dict[str, Any]


def webhook_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The three Standard Webhooks headers, each of which must come at most once.

    A multi-valued mapping (Starlette's `Headers`, aiohttp's `CIMultiDict`, httpx's `Headers`)
    shows every value of a repeated name; a repeat is refused with `RepeatedHeaders`, since a
    receiver could otherwise verify one `webhook-id` and deduplicate on another.
    """
    multi_items = getattr(headers, "multi_items", None)  # httpx joins repeats in `items()`
    pairs: Iterable[tuple[str, str]] = multi_items() if callable(multi_items) else headers.items()
    found: dict[str, str] = {}
    for name, value in pairs:
        lowered = name.lower()
        if lowered in WEBHOOK_HEADERS:
            if lowered in found:
                raise RepeatedHeaders(f"the {lowered} header was sent more than once")
            found[lowered] = value
    return found


def verify_delivery(
    secret: Verifier | str | Iterable[Verifier | str],
    headers: Mapping[str, str],
    raw_body: bytes,
    tolerance: float = DEFAULT_SIGNATURE_TOLERANCE,
) -> Delivery:
    """`verify`, also returning the signed `webhook-id` (the one value to deduplicate on)."""
    signed = verify_signature(secret, webhook_headers(headers), raw_body, tolerance=tolerance)
    try:
        event = json.loads(raw_body)
    except (ValueError, RecursionError):
        raise InvalidSignature("the signed body is not JSON (or is nested too deep)") from None
    if not isinstance(event, dict):
        raise InvalidSignature("the signed body is not a JSON object")
    return Delivery(signed.id, signed.timestamp, event)


def verify(
    secret: Verifier | str | Iterable[Verifier | str],
    headers: Mapping[str, str],
    raw_body: bytes,
    tolerance: float = DEFAULT_SIGNATURE_TOLERANCE,
) -> dict[str, Any]:
    """The event in `raw_body` once its Standard Webhooks signature checks out.

    `secret` is the endpoint's `whsec_…` secret or, for an ed25519 endpoint, its `whpk_…` public
    key (or several, while rotating); the prefix is required (`ValueError` without it). Pass the
    body exactly as received (bytes, before any JSON parsing), and the headers as the framework
    gives them (multi-valued if it can). Raises `MissingHeaders`, `RepeatedHeaders`,
    `TimestampOutOfRange` or `InvalidSignature` (all `SignatureError`).
    """
    return verify_delivery(secret, headers, raw_body, tolerance).event
