"""SSRF table: every refused address form and every spelling of one, as a URL and at the socket."""

from __future__ import annotations

import socket
from ipaddress import ip_address

import pytest

from ssrf_spellings import SPELLINGS
from ustun.errors import RefusedAddress
from ustun.webhooks.addresses import ALLOW_PRIVATE_HINT, forbidden_reason, url_refusal
from ustun.webhooks.sending.transport import guarded_socket

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
    assert url_refusal(f"https://{host}:8443/hook", allow_private=False) == (
        f"{reason}; {ALLOW_PRIVATE_HINT}"
    )
    assert url_refusal(f"http://{host}:8443/hook", allow_private=True) is None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_allowed(address: str) -> None:
    assert forbidden_reason(ip_address(address)) is None
    host = f"[{address}]" if ":" in address else address
    assert url_refusal(f"https://{host}/hook", allow_private=False) is None


@pytest.mark.parametrize(("host", "why"), SPELLINGS)
def test_spellings_refused(host: str, why: str) -> None:
    reason = url_refusal(f"https://{host}:8444/internal", allow_private=False)
    assert reason is not None
    assert why in reason
    assert reason.endswith(ALLOW_PRIVATE_HINT)
    assert url_refusal(f"http://{host}:8444/internal", allow_private=True) is None


def test_refusals_of_private_targets_name_the_setting() -> None:
    """An operator reading a refusal learns which server setting lifts it, and that it needs a
    restart; syntax errors, which no setting lifts, do not mention it."""
    for url in ("http://hooks.example.com/x", "https://10.0.0.1/x", "https://localhost/x"):
        reason = url_refusal(url, allow_private=False)
        assert reason is not None
        assert "USTUN_WEBHOOK_ALLOW_PRIVATE=1" in reason
        assert "restart" in reason
    invalid = url_refusal("https://ex%41mple.com/x", allow_private=False)
    assert invalid is not None
    assert "USTUN_WEBHOOK_ALLOW_PRIVATE" not in invalid


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/hook",
        "https://hooks.example.com./hook",
        "https://bücher.example/hook",
        "https://xn--bcher-kva.example/hook",
        "https://_hooks.example.com/hook",
        "https://1e2.example.com/hook",
        "https://8.8.8.8/hook",
        "https://８.８.８.８/hook",  # noqa: RUF001
        "https://[2606:4700::1111]:8443/hook",
    ],
)
def test_public_names_and_addresses_allowed(url: str) -> None:
    assert url_refusal(url, allow_private=False) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://example.com/hook", "https"),
        ("ftp://example.com/hook", "https"),
        ("https:///hook", "no host"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("https://example.com:99999/hook", "valid URL"),
        ("https://134744072/hook", "as a.b.c.d"),
        ("https://8.8.8.8./hook", "as a.b.c.d"),
        ("https://1.2.3.4.5/hook", "is no IPv4 address"),
        ("https://8.8.8.256/hook", "is no IPv4 address"),
        ("https://ex%41mple.com/hook", "not a valid host name"),
        ("https://a b.example/hook", "not a valid host name"),
        ("https://-a.example/hook", "not a valid host name"),
        (f"https://{'a' * 64}.example/hook", "not a valid host name"),
    ],
)
def test_url_rules(url: str, why: str) -> None:
    reason = url_refusal(url, allow_private=False)
    assert reason is not None
    assert why in reason


def _addr_info(
    address: str,
) -> tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int]]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, 443)


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_socket_factory_refuses(address: str, why: str) -> None:
    """The connect-time check: every address the connector is about to connect to."""
    with pytest.raises(RefusedAddress, match=why):
        guarded_socket(_addr_info(address))


@pytest.mark.parametrize("address", ALLOWED)
def test_socket_factory_opens_public(address: str) -> None:
    with guarded_socket(_addr_info(address)) as sock:
        assert sock.family == _addr_info(address)[0]
