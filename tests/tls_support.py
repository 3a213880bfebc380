"""TLS test helpers: certificates made at test time (trustme), and a local HTTPS receiver that
requires a client certificate its authority issued (mutual TLS)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trustme
from aiohttp import web

from support import free_port

# The name a client certificate is issued for, and shows to the receiver.
CLIENT_NAME = "ustun-client.example"


def client_pems(ca: trustme.CA) -> dict[str, str]:
    """An endpoint's `mtls` body: a client certificate `ca` issued, its key, and `ca` to trust
    for the receiver's certificate."""
    leaf = ca.issue_cert(CLIENT_NAME)
    return {
        "certificate": "".join(pem.bytes().decode() for pem in leaf.cert_chain_pems),
        "private_key": leaf.private_key_pem.bytes().decode(),
        "ca_bundle": ca.cert_pem.bytes().decode(),
    }


@dataclass
class MutualTls:
    """A local HTTPS receiver on `port` that takes only client certificates its CA issued;
    `seen` holds each accepted request's client certificate names."""

    port: int = field(default_factory=free_port)
    seen: list[str] = field(default_factory=list)

    def url(self, path: str = "/hook") -> str:
        return f"https://localhost:{self.port}{path}"


@asynccontextmanager
async def mutual_tls(ca: trustme.CA) -> AsyncIterator[MutualTls]:
    """`MutualTls` serving until the `async with` ends."""
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_tls)
    ca.configure_trust(server_tls)
    server_tls.verify_mode = ssl.CERT_REQUIRED
    served = MutualTls()

    async def hook(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        served.seen.append(str(peer.get("subjectAltName")) if peer else "")
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", served.port, ssl_context=server_tls).start()
    try:
        yield served
    finally:
        await runner.cleanup()
