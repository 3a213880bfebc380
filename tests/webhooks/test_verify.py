"""`verify` refuses a repeated webhook header in every multi-valued mapping a framework hands it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import httpx
import multidict
import pytest
from starlette.datastructures import Headers

from ustun.http.signature import Secret, headers
from ustun.webhooks import RepeatedHeaders, verify
from ustun.webhooks.receiving.verify import verify_delivery

SECRET = Secret.generate()
BODY = json.dumps({"id": "evt_1", "type": "ping", "data": {}}).encode()


def signed(event_id: str = "evt_1") -> dict[str, str]:
    """Headers signed now: made at collection time they would age past the tolerance."""
    return headers([SECRET], event_id, BODY)


Pairs = list[tuple[str, str]]
MAPPINGS: dict[str, Callable[[Pairs], Mapping[str, str]]] = {
    "starlette": lambda pairs: Headers(raw=[(k.encode(), v.encode()) for k, v in pairs]),
    "httpx": httpx.Headers,
    "aiohttp": multidict.CIMultiDict,
}


@pytest.mark.parametrize("kind", MAPPINGS)
@pytest.mark.parametrize("name", ["webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE"])
def test_a_repeated_header_is_refused(kind: str, name: str) -> None:
    # A fresh value first, the signed one last: the signature alone would pass.
    pairs = [(name, signed("evt_2")[name.lower()]), *signed().items()]
    with pytest.raises(RepeatedHeaders, match=name.lower()):
        verify(SECRET, MAPPINGS[kind](pairs), BODY)


@pytest.mark.parametrize("kind", MAPPINGS)
def test_single_headers_verify_and_give_the_signed_id(kind: str) -> None:
    now = signed()
    delivery = verify_delivery(SECRET, MAPPINGS[kind](list(now.items())), BODY)
    assert delivery.id == "evt_1"
    assert delivery.event["type"] == "ping"
    assert verify(SECRET, now, BODY) == delivery.event
