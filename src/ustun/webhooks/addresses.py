"""SSRF rules for outbound webhook URLs (pure): which schemes and addresses are refused.

Refused: loopback, private (RFC 1918), link-local, CGNAT 100.64/10 (RFC 6598), multicast,
reserved and unspecified addresses, IPv6 unique-local fc00::/7, and any IPv6 form that embeds
such an IPv4 address (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96 of RFC 6052, 6to4, Teredo).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")


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


def literal_address(host: str) -> IPAddress | None:
    """The address when `host` is an IP literal (brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why `url` may not receive webhooks (scheme, host, literal address), or None if it may."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        return "the URL must use https"
    if not host:
        return "the URL has no host"
    if parts.username or parts.password:
        return "the URL must not carry credentials"
    if allow_private:
        return None
    ip = literal_address(host)
    return None if ip is None else forbidden_reason(ip)
