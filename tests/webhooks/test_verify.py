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
from ustun.webhooks.verify import verify_delivery

SECRET = Secret.generate()
BODY = json.dumps({"id": "evt_1", "type": "ping", "data": {}}).encode()
SIGNED = headers([SECRET], "evt_1", BODY)
FRESH = headers([SECRET], "evt_2", BODY)

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
    pairs = [(name, FRESH[name.lower()]), *SIGNED.items()]
    with pytest.raises(RepeatedHeaders, match=name.lower()):
        verify(SECRET, MAPPINGS[kind](pairs), BODY)


@pytest.mark.parametrize("kind", MAPPINGS)
def test_single_headers_verify_and_give_the_signed_id(kind: str) -> None:
    delivery = verify_delivery(SECRET, MAPPINGS[kind](list(SIGNED.items())), BODY)
    assert delivery.id == "evt_1"
    assert delivery.event["type"] == "ping"
    assert verify(SECRET, SIGNED, BODY) == delivery.event
