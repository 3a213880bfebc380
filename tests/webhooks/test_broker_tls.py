"""Brokers over TLS, for real: a NATS server of the test's own with a certificate made here
(trustme), and the machine's RabbitMQ behind a TLS port. Published over `tls://` and `amqps://`
when the certificate's authority is trusted; a failed attempt naming the certificate when not.
The rule that a broker beyond private networks must use TLS is tested with the other URL rules
(tests/webhooks/test_broker_destinations.py)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
import trustme
from nats.js.api import StreamConfig

from broker_support import NatsServer, Proxy, drain_queue, event, rabbitmq_exchange, unique
from ustun.http.signature import Secret
from ustun.webhooks.brokers import Brokers, Destination
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ

SECRET = Secret.generate()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def trusted(ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's authority is the one this process trusts (OpenSSL reads `SSL_CERT_FILE`)."""
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))


@pytest.fixture
async def nats_tls(ca: trustme.CA, tmp_path: Path) -> AsyncIterator[tuple[int, str]]:
    """A NATS server that takes TLS only, with a stream on a subject of its own: (port, subject)."""
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = tmp_path / "server.pem", tmp_path / "server.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    server = NatsServer(
        tmp_path / "js", extra=("--tls", "--tlscert", str(cert_file), "--tlskey", str(key_file))
    )
    await server.start()
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    client = await nats.connect(f"tls://localhost:{server.port}", tls=client_tls)
    subject = unique("ustun.tls")
    try:
        await client.jetstream().add_stream(StreamConfig(name="TLS", subjects=[subject]))
        yield server.port, subject
    finally:
        await client.close()
        await server.stop()


@contextlib.asynccontextmanager
async def rabbitmq_tls(ca: trustme.CA) -> AsyncIterator[Proxy]:
    """The machine's RabbitMQ behind a TLS port whose certificate `ca` issued for localhost."""
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_tls)
    async with Proxy(5672, tls=server_tls) as proxy:
        yield proxy


async def test_nats_over_tls_publishes_when_the_certificate_is_trusted(
    nats_tls: tuple[int, str], trusted: None
) -> None:
    port, subject = nats_tls
    sent = event(SECRET)
    async with Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(NATS, f"tls://localhost:{port}", subject), *sent.args()
        )
    assert got.ok, got
    assert "stream 'TLS'" in (got.response or "")


async def test_nats_over_tls_with_an_untrusted_certificate_is_a_failed_attempt(
    nats_tls: tuple[int, str],
) -> None:
    port, subject = nats_tls
    async with Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(NATS, f"tls://localhost:{port}", subject), *event(SECRET).args()
        )
    assert not got.ok
    assert not got.permanent  # the operator may fix the trust: retried on the schedule
    assert "CERTIFICATE_VERIFY_FAILED" in (got.error or "")


async def test_rabbitmq_over_tls_publishes_when_the_certificate_is_trusted(
    ca: trustme.CA, trusted: None
) -> None:
    sent = event(SECRET)
    async with (
        rabbitmq_exchange() as exchange,
        rabbitmq_tls(ca) as proxy,
        Brokers(timeout=5, allow_private=True) as brokers,
    ):
        url = f"amqps://guest:guest@localhost:{proxy.port}/"
        got = await brokers.publish(Destination(RABBITMQ, url, exchange.name), *sent.args())
        assert got.ok, got
        [received] = await drain_queue(exchange.queue)
    assert received.body == sent.body
    assert proxy.accepted == 1


async def test_rabbitmq_over_tls_with_an_untrusted_certificate_is_a_failed_attempt(
    ca: trustme.CA,
) -> None:
    async with (
        rabbitmq_exchange() as exchange,
        rabbitmq_tls(ca) as proxy,
        Brokers(timeout=5, allow_private=True) as brokers,
    ):
        url = f"amqps://guest:guest@localhost:{proxy.port}/"
        got = await brokers.publish(
            Destination(RABBITMQ, url, exchange.name), *event(SECRET).args()
        )
    assert not got.ok
    assert "CERTIFICATE_VERIFY_FAILED" in (got.error or "")
    assert "guest:guest" not in (got.error or "")
