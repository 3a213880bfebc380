"""Mutual TLS to an endpoint: the certificate, key and authorities checked at the door, and a
real handshake with a local HTTPS server that requires a client certificate (made here with
trustme): accepted with the endpoint's certificate, refused without it, the refusal an outcome
whose error says so."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tls_support import CLIENT_NAME, MutualTls, client_pems, mutual_tls
from ustun.webhooks import endpoint_auth
from ustun.webhooks.endpoint_auth import MAX_CERTIFICATE, ClientCertificate
from ustun.webhooks.sending import transport


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def client(ca: trustme.CA) -> ClientCertificate:
    """A client certificate `ca` issued, with the CA as the authority to trust for servers."""
    return endpoint_auth.client_certificate(**client_pems(ca))


def test_a_certificate_and_its_key_are_accepted_and_summarised(client: ClientCertificate) -> None:
    shown = endpoint_auth.summary(client.certificate)
    assert shown.subject.startswith("OU=Testing cert")  # trustme's, RFC 4514
    assert shown.not_after.tzinfo is not None
    assert "BEGIN" not in repr(client)


def test_a_key_of_another_certificate_is_refused(ca: trustme.CA, client: ClientCertificate) -> None:
    other = ca.issue_cert("other.example").private_key_pem.bytes().decode()
    with pytest.raises(ValueError, match="does not belong to the certificate"):
        endpoint_auth.client_certificate(client.certificate, other)


def test_an_encrypted_key_is_refused_with_what_to_do(client: ClientCertificate) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    ).decode()
    with pytest.raises(ValueError, match="without a passphrase"):
        endpoint_auth.client_certificate(client.certificate, encrypted)


@pytest.mark.parametrize(
    ("certificate", "key", "bundle", "reason"),
    [
        ("not a certificate", None, None, "the certificate is not PEM certificates"),
        (None, "not a key", None, "the private key is not a PEM private key"),
        (None, None, "-----BEGIN CERTIFICATE-----\nAAAA\n", "the CA bundle is not PEM"),
        ("x" * (MAX_CERTIFICATE + 1), None, None, "the certificate is over 16384 characters"),
        (None, "x" * (MAX_CERTIFICATE + 1), None, "the private key is over 16384 characters"),
    ],
)
def test_malformed_or_oversized_pem_is_refused_saying_which(
    client: ClientCertificate,
    certificate: str | None,
    key: str | None,
    bundle: str | None,
    reason: str,
) -> None:
    with pytest.raises(ValueError, match=reason):
        endpoint_auth.client_certificate(
            certificate or client.certificate, key or client.private_key, bundle
        )


@pytest.mark.parametrize(
    ("url", "secret", "reason"),
    [
        ("http://auth.example.com/token", "s", "the token URL is refused: the URL must use https"),
        ("https://10.0.0.1/token", "s", "the token URL is refused: 10.0.0.1 is a private"),
        ("https://auth.example.com/token", "", "the client secret must be 1 to 1024"),
        ("https://auth.example.com/token", "a\nb", "the client secret must be 1 to 1024"),
    ],
)
def test_oauth2_credentials_are_checked_like_endpoint_urls(
    url: str, secret: str, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        endpoint_auth.oauth2(url, "ustun", secret, allow_private=False)


def test_oauth2_credentials_never_show_the_secret() -> None:
    checked = endpoint_auth.oauth2(
        "https://auth.example.com/token", "ustun", "s3cret-value", "hooks", allow_private=False
    )
    assert "s3cret-value" not in repr(checked)


@pytest.fixture
async def receiver(ca: trustme.CA) -> AsyncIterator[MutualTls]:
    async with mutual_tls(ca) as served:
        yield served


async def post(receiver: MutualTls, tls: ssl.SSLContext) -> transport.Outcome:
    """One POST to the receiver as the dispatcher sends it, with the TLS context `tls`."""
    async with transport.session(timeout=5, allow_private=True, limit=4) as http:
        return await transport.post(http, receiver.url(), b"{}", {}, allow_private=True, tls=tls)


async def test_the_endpoints_client_certificate_is_presented_and_accepted(
    receiver: MutualTls, client: ClientCertificate
) -> None:
    got = await post(receiver, endpoint_auth.ssl_context(client))
    assert got.status == 200, got
    assert len(receiver.seen) == 1
    assert CLIENT_NAME in receiver.seen[0]


async def test_without_a_client_certificate_the_server_refuses_and_the_outcome_says_so(
    receiver: MutualTls, client: ClientCertificate
) -> None:
    trusting = ssl.create_default_context(cadata=client.ca_bundle)  # the server, but no client
    got = await post(receiver, trusting)
    # TLS 1.3 refuses after the handshake: the client reads the server's alert or, when the
    # server's reset comes first, the reset. Either way no request reached the receiver.
    assert got.status is None
    assert got.error is not None
    assert "certificate required" in got.error or "Connection reset" in got.error
    assert receiver.seen == []


async def test_a_server_certificate_outside_the_endpoints_authorities_is_refused(
    receiver: MutualTls, client: ClientCertificate
) -> None:
    stranger = trustme.CA().cert_pem.bytes().decode()
    alone = ClientCertificate(client.certificate, client.private_key, stranger)
    got = await post(receiver, endpoint_auth.ssl_context(alone))
    assert got.status is None
    assert "CERTIFICATE_VERIFY_FAILED" in (got.error or "")
