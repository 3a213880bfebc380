"""SSRF, for real: every spelling of a refused host is refused at registration through the API,
and sending to it through the real transport never opens a TCP connection to a local listener
on the port the URL names (127.0.0.1 and ::1); names resolving to loopback are refused at the
socket. Both databases where a database is involved."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest
from sqlalchemy import select

from ssrf_spellings import SPELLINGS
from support import in_background
from ustun.errors import RefusedAddress
from ustun.store import Database
from ustun.webhooks.addresses import ALLOW_PRIVATE_HINT
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.sending.transport import post, session
from ustun.webhooks.tables import attempts, deliveries
from webhook_support import MakeEndpoint, until

HOSTS = [host for host, _ in SPELLINGS]


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


IPV6_LOOPBACK = _has_ipv6_loopback()


class Listener:
    """Plain TCP listeners on one port of 127.0.0.1 and (when the machine has IPv6) ::1, which
    record every connection they accept and close it at once."""

    def __init__(self) -> None:
        self.port = 0
        self.addresses: list[str] = []
        self.peers: list[tuple[str, int]] = []
        self._servers: list[asyncio.Server] = []

    async def _accept(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer.get_extra_info("peername")[:2])
        writer.close()

    async def start(self) -> Listener:
        for _ in range(20):  # a port free on both addresses
            self._servers = [await asyncio.start_server(self._accept, "127.0.0.1", 0)]
            self.port = self._servers[0].sockets[0].getsockname()[1]
            try:
                if IPV6_LOOPBACK:
                    self._servers.append(await asyncio.start_server(self._accept, "::1", self.port))
            except OSError:
                await self.stop()
                continue
            self.addresses = ["127.0.0.1", "::1"] if IPV6_LOOPBACK else ["127.0.0.1"]
            return self
        raise AssertionError("no port free on both 127.0.0.1 and ::1")

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
            await server.wait_closed()

    async def accepted(self) -> list[tuple[str, int]]:
        """Every connection accepted so far, settled: a marker connects to each address and is
        awaited (a listen queue is first in, first out), then the markers are left out."""
        markers = []
        for address in self.addresses:
            _, writer = await asyncio.open_connection(address, self.port)
            markers.append(writer.get_extra_info("sockname")[:2])
            writer.close()

        async def markers_seen() -> bool:
            return all(marker in self.peers for marker in markers)

        await until(markers_seen, within=5, what="the marker connections to be accepted")
        seen = [peer for peer in self.peers if peer not in markers]
        self.peers.clear()
        return seen


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    started = await Listener().start()
    yield started
    await started.stop()


def _url(host: str, port: int) -> str:
    return f"https://{host}:{port}/internal"


async def test_the_listener_sees_a_connection_when_the_guard_is_off(listener: Listener) -> None:
    """The control: without the guard (allow_private) the full-width spelling does reach
    127.0.0.1 -- the bypass of issue 15 -- so a zero below means no connection was made."""
    async with session(timeout=5, allow_private=True, limit=4) as http:
        url = _url("１２７.０.０.１", listener.port)  # noqa: RUF001
        outcome = await post(http, url, b"{}", {}, allow_private=True)
    assert outcome.error is not None
    assert [address for address, _ in await listener.accepted()] == ["127.0.0.1"]


async def test_every_spelling_is_refused_by_the_transport(listener: Listener) -> None:
    """`post` refuses each spelling before it connects, and says so in the attempt's error."""
    async with session(timeout=5, allow_private=False, limit=4) as http:
        for host in HOSTS:
            outcome = await post(http, _url(host, listener.port), b"{}", {}, allow_private=False)
            assert outcome.status is None, host
            assert outcome.error is not None, host
            assert outcome.error.startswith("refused: "), (host, outcome.error)
    assert await listener.accepted() == []


async def test_the_connector_alone_never_connects_to_a_spelling(listener: Listener) -> None:
    """Past the URL check (as if it had a hole), the guarded connector still never connects:
    aiohttp either refuses the host, fails to resolve it, or the socket factory refuses."""
    async with session(timeout=5, allow_private=False, limit=4) as http:
        for host in HOSTS:
            with pytest.raises(aiohttp.ClientError):
                async with http.post(_url(host, listener.port), data=b"{}"):
                    pass
    assert await listener.accepted() == []


async def test_a_name_resolving_to_loopback_is_refused_at_the_socket(listener: Listener) -> None:
    """`localhost` resolves (through /etc/hosts) to loopback; the connect-time check refuses the
    address it resolved to, since the name itself never reaches a URL check here."""
    resolved = {info[4][0] for info in socket.getaddrinfo("localhost", listener.port)}
    assert "127.0.0.1" in resolved
    async with session(timeout=5, allow_private=False, limit=4) as http:
        with pytest.raises(aiohttp.ClientConnectorError) as caught:
            async with http.post(_url("localhost", listener.port), data=b"{}"):
                pass
    assert "loopback address" in str(caught.value)
    if len(resolved) == 1:
        assert isinstance(caught.value.os_error, RefusedAddress)
    assert await listener.accepted() == []


async def test_registration_refuses_every_spelling(client: httpx.AsyncClient) -> None:
    """POST and PATCH of each spelling: 422 validation-error on `body.url`, naming the setting."""
    made = await client.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/"})
    assert made.status_code == 201, made.text
    item = f"/v1/webhook-endpoints/{made.json()['id']}"
    etag = made.headers["etag"]
    for host in HOSTS:
        url = _url(host, 8444)
        for got in (
            await client.post("/v1/webhook-endpoints", json={"url": url}),
            await client.patch(item, json={"url": url}, headers={"if-match": etag}),
        ):
            assert got.status_code == 422, (host, got.text)
            assert got.headers["content-type"] == "application/problem+json"
            problem = got.json()
            assert problem["type"].endswith("/problems/validation-error")
            [error] = problem["errors"]
            assert error["field"] == "body.url"
    listed = await client.get("/v1/webhook-endpoints")
    assert [e["url"] for e in listed.json()["data"]] == ["https://hooks.example.com/"]


async def test_registration_refusal_names_the_setting(client: httpx.AsyncClient) -> None:
    for url in ("http://hooks.example.com/", _url(SPELLINGS[0][0], 8444)):
        got = await client.post("/v1/webhook-endpoints", json={"url": url})
        assert got.status_code == 422
        assert ALLOW_PRIVATE_HINT in got.json()["detail"]
        assert "USTUN_WEBHOOK_ALLOW_PRIVATE=1" in got.json()["errors"][0]["message"]


async def test_stored_spellings_are_never_delivered(
    db: Database,
    account_id: str,
    box: SecretBox,
    config: DispatchConfig,
    make_endpoint: MakeEndpoint,
    listener: Listener,
) -> None:
    """Endpoints stored before the registration check (inserted directly): the dispatcher's
    first attempt at each records a refusal, and the listener never sees a connection."""
    ids = {(await make_endpoint(_url(host, listener.port)))[0]: host for host in HOSTS}
    async with db.unit_of_work() as uow:
        await emit(uow, account_id, "payment.created", {"id": "pay_1"})
    guarded = dataclasses.replace(config, allow_private=False)

    async def errors() -> dict[str, Any] | None:
        async with db.read() as conn:
            rows = (
                await conn.execute(
                    select(deliveries.c.endpoint_id, attempts.c.error)
                    .join(attempts, attempts.c.delivery_id == deliveries.c.id)
                    .where(deliveries.c.endpoint_id.in_(ids))
                )
            ).all()
        found = {row.endpoint_id: row.error for row in rows}
        return found if len(found) == len(ids) else None

    async with in_background(Dispatcher(db, box, guarded)):
        found = await until(errors, within=20, what="an attempt at every endpoint")
    for endpoint_id, host in ids.items():
        assert found[endpoint_id].startswith("refused: "), (host, found[endpoint_id])
    assert await listener.accepted() == []
    async with db.read() as conn:
        statuses = (
            await conn.execute(select(deliveries.c.status).where(deliveries.c.endpoint_id.in_(ids)))
        ).scalars()
        assert set(statuses) <= {"pending", "failed", "dead"}
