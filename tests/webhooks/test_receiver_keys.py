"""The receiver and `ustun listen` take only a key with its prefix (`whsec_` or `whpk_`): a bare
ed25519 public key, taken for an HMAC secret, would let anyone forge `v1` signatures (issue 26,
item 13)."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest
from typer.testing import CliRunner

from broker_support import NATS_URL, RABBITMQ_URL
from ustun import cli
from ustun.http.signature import Secret, SigningKey, headers
from ustun.webhooks.receiving.consumers import consume_nats, consume_rabbitmq
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.receiving.inbox import MemoryInbox
from ustun.webhooks.receiving.receiver import WebhookReceiver

SECRET = Secret.generate()
BODY = json.dumps({"id": "evt_1", "type": "payment.succeeded", "data": {"id": "pay_1"}}).encode()


async def _post(receiver: WebhookReceiver, sent: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=receiver)
    async with httpx.AsyncClient(transport=transport, base_url="http://r") as c:
        return await c.post("/hook", content=BODY, headers=sent)


def test_a_receiver_refuses_a_public_key_without_its_prefix() -> None:
    """Taken for an HMAC secret, public bytes would let anyone sign `v1` (issue 26, item 13)."""
    public = SigningKey.generate().public_key
    bare = base64.b64encode(public.key).decode()
    with pytest.raises(ValueError, match="`whpk_`"):
        WebhookReceiver(bare, inbox=MemoryInbox())
    with pytest.raises(ValueError, match="`whpk_`"):
        WebhookReceiver([str(SECRET), bare], inbox=MemoryInbox())


async def test_a_v1_signature_made_with_the_public_key_is_refused() -> None:
    key = SigningKey.generate()
    receiver = WebhookReceiver(str(key.public_key), inbox=MemoryInbox())
    forged = headers([Secret(key.public_key.key)], "evt_1", BODY, timestamp=int(time.time()))
    assert (await _post(receiver, forged)).status_code == 401
    genuine = headers([key], "evt_1", BODY)
    assert (await _post(receiver, genuine)).status_code == 204
    await receiver.drain()


@pytest.mark.parametrize(
    "given",
    [base64.b64encode(SigningKey.generate().public_key.key).decode(), "hello"],
    ids=["bare-public-key", "not-a-key"],  # the same ids in every xdist worker
)
def test_listen_refuses_a_key_without_its_prefix_in_one_line(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.delenv("USTUN_LISTEN_SECRET", raising=False)
    # An address no server binds: the key is refused first, or this ends at once, not serving.
    args = ["listen", "--secret", "-", "--host", "256.0.0.0"]
    refused = CliRunner().invoke(cli.app, args, input=f"{given}\n")
    assert refused.exit_code == 2
    assert "add the key's prefix" in refused.output
    assert given not in refused.output


@pytest.mark.parametrize("kind", ["rabbitmq", "nats"])
async def test_a_consumer_refuses_a_key_without_its_prefix_before_it_connects(kind: str) -> None:
    bare = base64.b64encode(SigningKey.generate().public_key.key).decode()
    inbox, handlers = MemoryInbox(), Handlers()
    with pytest.raises(ValueError, match="`whpk_`"):
        if kind == "rabbitmq":
            await consume_rabbitmq(RABBITMQ_URL, "nowhere", inbox, handlers, secret=bare)
        else:
            await consume_nats(NATS_URL, "nowhere", "nobody", inbox, handlers, secret=bare)
