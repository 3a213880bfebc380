"""Registration looks a URL's host name up: a name that resolves to a refused address (here,
loopback, through the machine's own hosts file) is refused on create and on a PATCH of `url`,
for HTTP and broker endpoints alike, as the docs promise (issue 26, item 14: it was refused only
at send time). A name that does not resolve is accepted; sends still vet every connection."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks.addresses import host_refusal
from webhook_support import serving

# RFC 6761 §6.4: no `.invalid` name ever resolves.
UNRESOLVED = "hooks.invalid"


def _resolves_only_to_loopback(name: str) -> bool:
    try:
        found = socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(f[4][0]).is_loopback for f in found)


@pytest.fixture(scope="module")
def loopback_name() -> str:
    """A host name this machine resolves to loopback only, that is no loopback *name* (such as
    `localhost`, refused as written): one of /etc/hosts, or the machine's own name."""
    hosts = Path("/etc/hosts")
    names = [socket.gethostname()]
    for line in hosts.read_text().splitlines() if hosts.exists() else ():
        names += line.partition("#")[0].split()[1:]
    for name in names:
        if host_refusal(name) is None and _resolves_only_to_loopback(name):
            return name
    pytest.skip("no host name here resolves to loopback alone")


def _bodies(host: str) -> dict[str, dict[str, Any]]:
    return {
        "http": {"url": f"https://{host}/hook"},
        "nats": {"kind": "nats", "url": f"tls://relay:pw@{host}:4222", "subject": "ustun.events"},
        "rabbitmq": {"kind": "rabbitmq", "url": f"amqps://relay:pw@{host}/", "exchange": "events"},
    }


def _refused_as_loopback(answer: httpx.Response, name: str) -> None:
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["errors"]
    assert error["field"] == "body.url"
    assert f"{name} resolves to a refused address" in error["message"]
    assert "is a loopback address" in error["message"]
    assert "USTUN_WEBHOOK_ALLOW_PRIVATE" in error["message"]
    assert "relay:pw" not in answer.text


@pytest.mark.parametrize("kind", ["http", "nats", "rabbitmq"])
async def test_a_name_that_resolves_to_loopback_is_refused_on_create(
    client: httpx.AsyncClient, loopback_name: str, kind: str
) -> None:
    body = _bodies(loopback_name)[kind]
    _refused_as_loopback(await client.post("/v1/webhook-endpoints", json=body), loopback_name)


@pytest.mark.parametrize("kind", ["http", "nats", "rabbitmq"])
async def test_a_name_that_resolves_to_loopback_is_refused_on_patch(
    client: httpx.AsyncClient, loopback_name: str, kind: str
) -> None:
    """Registered at a name that does not resolve (accepted), then moved to the loopback one."""
    made = await client.post("/v1/webhook-endpoints", json=_bodies(UNRESOLVED)[kind])
    assert made.status_code == 201, made.text
    url = _bodies(loopback_name)[kind]["url"]
    path = made.headers["location"]
    moved = await client.patch(path, json={"url": url}, headers={"if-match": "*"})
    _refused_as_loopback(moved, loopback_name)
    assert UNRESOLVED in (await client.get(path)).json()["url"]


async def test_allowing_private_addresses_allows_the_name(
    settings: Settings, db: Database, api_key: str, loopback_name: str
) -> None:
    async with serving(settings, db, api_key) as allowing:  # USTUN_WEBHOOK_ALLOW_PRIVATE=1
        for body in _bodies(loopback_name).values():
            made = await allowing.post("/v1/webhook-endpoints", json=body)
            assert made.status_code == 201, made.text
