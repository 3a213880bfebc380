"""How an endpoint's receiver may require ustun to prove who it is, beyond the signature.

Mutual TLS: the endpoint carries a client certificate chain and its private key (PEM), and may
carry authorities to trust for the receiver's own certificate in place of the system's. OAuth2
client credentials (RFC 6749 §4.4): a token URL, a client id and secret and an optional scope;
the worker fetches a bearer token and sends it with each delivery (`sending.oauth2`). Each is
checked at the door (`ValueError` saying what is wrong); the private key and the client secret
are sealed at rest like signing secrets, and never shown.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ustun.webhooks.addresses import url_refusal

MAX_CERTIFICATE = 16 * 1024
"""The longest client certificate chain or private key, in PEM characters."""
MAX_CA_BUNDLE = 64 * 1024
"""The longest bundle of trusted authorities, in PEM characters."""
MAX_OAUTH2_FIELD = 1024
"""The longest client id, client secret or scope."""


@dataclass(frozen=True, slots=True, repr=False)
class ClientCertificate:
    """A TLS client certificate chain (leaf first) with its key, and authorities to trust."""

    certificate: str
    private_key: str
    ca_bundle: str | None = None

    def __repr__(self) -> str:
        return "ClientCertificate(<sealed>)"


@dataclass(frozen=True, slots=True, repr=False)
class OAuth2:
    """OAuth2 client credentials: where to get a token, and with what."""

    token_url: str
    client_id: str
    client_secret: str
    scope: str | None = None

    def __repr__(self) -> str:
        return f"OAuth2({self.token_url}, {self.client_id}, <sealed>)"


@dataclass(frozen=True, slots=True)
class CertificateSummary:
    """What an endpoint shows of its client certificate: its leaf's subject and validity."""

    subject: str
    not_after: datetime


def _pem_certificates(pem: str, what: str, limit: int) -> list[x509.Certificate]:
    if len(pem) > limit:
        raise ValueError(f"the {what} is over {limit} characters")
    try:
        found = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise ValueError(
            f"the {what} is not PEM certificates (-----BEGIN CERTIFICATE-----)"
        ) from None
    return found


def client_certificate(
    certificate: str, private_key: str, ca_bundle: str | None = None
) -> ClientCertificate:
    """The three checked: PEM within bounds, an unencrypted key that matches the leaf."""
    chain = _pem_certificates(certificate, "certificate", MAX_CERTIFICATE)
    if len(private_key) > MAX_CERTIFICATE:
        raise ValueError(f"the private key is over {MAX_CERTIFICATE} characters")
    try:
        key = serialization.load_pem_private_key(private_key.encode(), password=None)
    except TypeError:
        raise ValueError("the private key is encrypted; give it without a passphrase") from None
    except ValueError:
        raise ValueError("the private key is not a PEM private key") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    leaf = chain[0]
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise ValueError("the private key does not belong to the certificate (the first one)")
    if ca_bundle is not None:
        _pem_certificates(ca_bundle, "CA bundle", MAX_CA_BUNDLE)
    return ClientCertificate(certificate, private_key, ca_bundle)


def summary(certificate: str) -> CertificateSummary:
    """The leaf's subject (RFC 4514) and the end of its validity."""
    leaf = x509.load_pem_x509_certificates(certificate.encode())[0]
    return CertificateSummary(leaf.subject.rfc4514_string(), leaf.not_valid_after_utc)


def ssl_context(cert: ClientCertificate) -> ssl.SSLContext:
    """A verifying client context presenting `cert`: the system's authorities, or its bundle.

    `ssl` loads a certificate chain only from files: the PEMs are written to a directory only
    this process's user can read and removed as soon as they are loaded."""
    context = ssl.create_default_context(cadata=cert.ca_bundle)
    with tempfile.TemporaryDirectory(prefix="ustun-mtls-") as folder:
        paths = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, text in zip(paths, (cert.certificate, cert.private_key), strict=True):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(text)
        context.load_cert_chain(*paths)
    return context


def _bounded(value: str, what: str) -> str:
    if not value or len(value) > MAX_OAUTH2_FIELD or not value.isprintable():
        raise ValueError(f"the {what} must be 1 to {MAX_OAUTH2_FIELD} printable characters")
    return value


def oauth2(
    token_url: str,
    client_id: str,
    client_secret: str,
    scope: str | None = None,
    *,
    allow_private: bool,
) -> OAuth2:
    """The credentials checked: the token URL by the rules of endpoint URLs (https, no
    private address unless allowed), the rest bounded printable text."""
    refusal = url_refusal(token_url, allow_private=allow_private)
    if refusal is not None:
        raise ValueError(f"the token URL is refused: {refusal}")
    return OAuth2(
        token_url,
        _bounded(client_id, "client id"),
        _bounded(client_secret, "client secret"),
        None if scope is None else _bounded(scope, "scope"),
    )
