"""SSRF rules for outbound webhook URLs: which schemes, hosts and addresses are refused.

Refused: loopback, private (RFC 1918), link-local, CGNAT 100.64/10 (RFC 6598), multicast,
reserved and unspecified addresses, IPv6 unique-local fc00::/7, and any IPv6 form that embeds
such an IPv4 address (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96 of RFC 6052, 6to4, Teredo).
A URL is read with yarl, exactly as aiohttp reads it before connecting, so 127.0.0.1 written
in full-width digits is judged as the `127.0.0.1` it becomes; the host is also judged as a
lenient parser (WHATWG URL, a proxy) would read it: percent-decoded, IDNA labels decoded,
numbers in any base.

All of it is pure but `lookup` and `resolution_refusal`, which ask the system's resolver what a
name stands for now: registration refuses a name that resolves to a refused address, and a
broker connection goes to an address vetted that way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from urllib.parse import unquote

import idna
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOW_PRIVATE_HINT = (
    "the server setting USTUN_WEBHOOK_ALLOW_PRIVATE=1 allows plain http and private addresses "
    "for development (it takes effect when the server restarts)"
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")

# WHATWG URL §3.5 "IPv4 number": decimal, octal with a leading 0, hex with 0x (empty = 0).
_IPV4_NUMBER = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
# RFC 1123 §2.1 host names, with `_` as real DNS allows; yarl has already lowercased the host.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_MAX_HOST_NAME = 253
# How long registration waits for a name to resolve; past that it is accepted unresolved.
LOOKUP_SECONDS = 2.0


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why a webhook may not be sent to `ip`, or None when it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return "a local-use NAT64 address"
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = forbidden_reason(inner)
            return None if reason is None else f"an IPv6 form of {inner}, {reason}"
    checks = (
        (ip.is_loopback, "a loopback address"),
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "a CGNAT (shared) address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_private, "a private address"),
        (not ip.is_global, "not a global address"),
    )
    for failed, reason in checks:
        if failed:
            return f"{ip} is {reason}"
    return None


def _private(reason: str) -> str:
    """A refusal that USTUN_WEBHOOK_ALLOW_PRIVATE lifts, saying so."""
    return f"{reason}; {ALLOW_PRIVATE_HINT}"


def address_refusal(address: str) -> str | None:
    """Why a socket may not connect to `address` (a numeric host), or None; for the transport."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address!r} is not an IP address"
    reason = forbidden_reason(ip)
    return None if reason is None else _private(reason)


def _ipv4_number(part: str) -> int:
    if not _IPV4_NUMBER.fullmatch(part):
        raise ValueError(part)
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def _ipv4(name: str) -> ipaddress.IPv4Address | None:
    """WHATWG URL §3.5 IPv4 parser: None unless `name` ends in a number; ValueError if invalid.

    This is how browsers and the C library's inet_aton read `2130706433`, `0x7f.1`, `0177.0.0.1`.
    """
    parts = name.split(".")
    if not _IPV4_NUMBER.fullmatch(parts[-1]):
        return None
    if len(parts) > 4:
        raise ValueError(name)
    numbers = [_ipv4_number(part) for part in parts]
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(name)
    return ipaddress.IPv4Address(sum(n << (8 * (3 - i)) for i, n in enumerate(head)) + last)


def _readings(host: str) -> list[str]:
    """`host` as aiohttp will use it, then as lenient parsers may read it: percent-decoded,
    then with `xn--` labels decoded and mapped (UTS #46: full-width digits, `。`, `①`)."""
    decoded = unquote(host)
    readings = [host, decoded]
    try:
        labels = [
            label[4:].encode("ascii").decode("punycode") if label.startswith("xn--") else label
            for label in decoded.split(".")
        ]
        readings.append(idna.uts46_remap(".".join(labels), std3_rules=False))
    except (UnicodeError, idna.IDNAError):
        pass  # not decodable: as a name, the connect-time check still vets what it resolves to
    return readings


def host_refusal(host: str) -> str | None:
    """Why webhooks may not go to `host` (a URL's `raw_host`, as yarl gives it), or None.

    A private target under any reading wins; else the host must be a dotted-quad IPv4 address
    (aiohttp refuses `127.1` but resolves `0x7f000001`), an IPv6 address or a DNS name.
    """
    if ":" in host:
        try:
            ip: IPAddress = ipaddress.ip_address(unquote(host))
        except ValueError:
            return f"{host!r} is not a valid IPv6 address"
        reason = forbidden_reason(ip)
        return None if reason is None else _private(reason)
    malformed = None
    for reading in _readings(host):
        name = reading.rstrip(".").lower()
        if name == "localhost" or name.endswith(".localhost"):
            return _private(f"{host} is a loopback name (RFC 6761 §6.3)")
        try:
            ipv4 = _ipv4(name)
        except ValueError:
            malformed = malformed or f"the host {host!r} ends in a number but is no IPv4 address"
            continue
        if ipv4 is None:
            continue
        reason = forbidden_reason(ipv4)
        if host != str(ipv4):
            malformed = malformed or f"write the IPv4 address {ipv4} as a.b.c.d, not {host!r}"
            if reason is not None:
                reason = f"{reason} (the host {host!r} reads as {ipv4})"
        if reason is not None:
            return _private(reason)
    if malformed is None and (len(host) > _MAX_HOST_NAME or not _HOST_NAME.fullmatch(host)):
        malformed = f"{host!r} is not a valid host name"
    return malformed


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why `url` may not receive webhooks (scheme, host, address), or None if it may.

    `url` is read with yarl as aiohttp reads it, so the host judged is the one it connects to.
    """
    try:
        target = URL(url)
        _ = target.port
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    allowed = ("https", "http") if allow_private else ("https",)
    if target.scheme not in allowed:
        return f"the URL must use https; {ALLOW_PRIVATE_HINT}"
    if not target.raw_host:
        return "the URL has no host"
    if target.user is not None or target.password is not None:
        return "the URL must not carry credentials"
    return None if allow_private else host_refusal(target.raw_host)


async def lookup(host: str, port: int) -> list[str]:
    """The numeric addresses `host` resolves to now, as a TCP connection to `port` would look it
    up; `OSError` when it does not resolve."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in infos]


def addresses_refusal(addresses: list[str]) -> str | None:
    """Why a connection may not go to some of `addresses`, or None when every one is public."""
    return next(filter(None, map(address_refusal, addresses)), None)


async def resolution_refusal(host: str, port: int, *, within: float = LOOKUP_SECONDS) -> str | None:
    """Why `host` may not be registered, as it resolves now, or None.

    A name that resolves to any refused address is refused. One that does not resolve within
    `within` seconds is accepted: a missing or slow answer says nothing of where the name will
    lead, and every connection is vetted again against the address it goes to.
    """
    try:
        async with asyncio.timeout(within):
            found = await lookup(host, port)
    except (OSError, TimeoutError):
        return None
    reason = addresses_refusal(found)
    return None if reason is None else f"{host} resolves to a refused address: {reason}"
