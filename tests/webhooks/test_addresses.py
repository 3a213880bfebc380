"""SSRF table: every refused address form, as a literal and (at send time) resolved."""

from __future__ import annotations

import socket
from ipaddress import ip_address

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from ustun.webhooks.addresses import forbidden_reason, url_refusal
from ustun.webhooks.transport import GuardedResolver, RefusedAddress, post, session

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.254", "CGNAT"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("::ffff:127.0.0.1", "IPv6 form of 127.0.0.1"),
    ("::ffff:10.0.0.1", "IPv6 form of 10.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "IPv6 form of 169.254.169.254"),
    ("64:ff9b::7f00:1", "IPv6 form of 127.0.0.1"),
    ("64:ff9b:1::1", "local-use NAT64"),
    ("2002:7f00:1::", "IPv6 form of 127.0.0.1"),
    ("198.18.0.1", "private"),
    ("192.0.2.1", "private"),
]
ALLOWED = ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_literal_refused(address: str, why: str) -> None:
    reason = forbidden_reason(ip_address(address))
    assert reason is not None
    assert why in reason
    host = f"[{address}]" if ":" in address else address
    assert url_refusal(f"https://{host}:8443/hook", allow_private=False) == reason
    assert url_refusal(f"http://{host}:8443/hook", allow_private=True) is None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_allowed(address: str) -> None:
    assert forbidden_reason(ip_address(address)) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://example.com/hook", "https"),
        ("ftp://example.com/hook", "https"),
        ("https:///hook", "no host"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("https://example.com:99999/hook", "valid URL"),
    ],
)
def test_url_rules(url: str, why: str) -> None:
    reason = url_refusal(url, allow_private=False)
    assert reason is not None
    assert why in reason


class StaticResolver(AbstractResolver):
    """Stands in for DNS: every name resolves to one fixed address."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        fam = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [
            {
                "hostname": host,
                "host": self.address,
                "port": port,
                "family": fam,
                "proto": 0,
                "flags": 0,
            }
        ]

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(("address", "why"), REFUSED)
async def test_resolved_refused(address: str, why: str) -> None:
    with pytest.raises(RefusedAddress, match=why):
        await GuardedResolver(StaticResolver(address)).resolve("hooks.example.com", 443)


async def test_resolved_public_passes_through() -> None:
    got = await GuardedResolver(StaticResolver("8.8.8.8")).resolve("hooks.example.com", 443)
    assert got[0]["host"] == "8.8.8.8"


async def test_send_time_refuses_a_name_resolving_to_loopback() -> None:
    """Real DNS: `localhost` resolves to loopback, so the send is refused before connecting."""
    async with session(timeout=2, allow_private=False, limit=4) as http:
        outcome = await post(http, "https://localhost:1/hook", b"{}", {}, allow_private=False)
        literal = await post(http, "https://127.0.0.1:1/hook", b"{}", {}, allow_private=False)
        plain = await post(http, "http://example.com/hook", b"{}", {}, allow_private=False)
    assert outcome.status is None
    assert outcome.error is not None
    assert "refused" in outcome.error
    assert "loopback" in outcome.error
    assert literal.error is not None
    assert "loopback" in literal.error
    assert plain.error is not None
    assert "https" in plain.error
