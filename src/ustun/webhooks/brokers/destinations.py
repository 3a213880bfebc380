"""Broker destinations: a kind, a URL that may carry credentials, and an exchange or a subject.

A broker URL is judged by the same SSRF rules as a webhook URL (`webhooks.addresses`): its host
when the endpoint is saved, and every address the name resolves to before each connection,
which then goes to the address vetted (`route`), not to a second answer for the name. Its query
options are an allow-list: the client libraries read server files and parse values from them.
Credentials are allowed in the URL (brokers need them) and never shown: `redact` drops them,
`scrub` removes them from a client library's error text. As webhooks must use https, a broker
outside private networks must be reached over TLS (`amqps://`, `tls://`), which verifies the
server's certificate against the URL's host; plain `amqp://` and `nats://` carry the broker's
credentials and every event in clear, so only `USTUN_WEBHOOK_ALLOW_PRIVATE` allows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from yarl import URL

from ustun.webhooks.addresses import (
    ALLOW_PRIVATE_HINT,
    addresses_refusal,
    host_refusal,
    lookup,
)

RABBITMQ, NATS = "rabbitmq", "nats"
KINDS = (RABBITMQ, NATS)
SCHEMES = {RABBITMQ: ("amqp", "amqps"), NATS: ("nats", "tls")}
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671, "nats": 4222, "tls": 4222}
# The scheme of each kind that connects over TLS: the only one allowed beyond private networks.
TLS_SCHEMES = {RABBITMQ: "amqps", NATS: "tls"}
# AMQP 0-9-1 (amqp0-9-1.xml, domain `exchange-name`): up to 127 characters of
# `^[a-zA-Z0-9-_.:]*$`; RabbitMQ allows 255 bytes. The empty default exchange is not a target.
_EXCHANGE = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
# AMQP 0-9-1 reserves `amq.` for the broker's own exchanges (amq.topic, amq.rabbitmq.trace…),
# which every user of a virtual host shares.
_RESERVED_EXCHANGE = "amq."
# NATS subjects (docs.nats.io, "Subject-Based Messaging"): dot-separated, non-empty tokens with
# no whitespace; `*` and `>` are wildcards for subscribers only, never a publish target.
_SUBJECT_PART = r"[^\s.*>]+"
_SUBJECT = re.compile(rf"{_SUBJECT_PART}(?:\.{_SUBJECT_PART})*")
_MAX_SUBJECT = 255
# `$` subjects are the server's own APIs (`$JS.API` creates, purges and deletes streams; `$SYS`,
# `$KV`, `$O`…) and `_INBOX.` ones carry the replies to other clients' requests: a tenant sharing
# the broker must never publish to either.
_RESERVED_SUBJECTS = ("$", "_INBOX.")
# The query options a broker URL may carry, with the values each takes: only those the client
# reads without harm. aiormq also reads `cafile`, `capath`, `certfile`, `keyfile` (files of this
# server, whose existence its errors reveal), `cadata` (base64 it decodes: a bad one raised out
# of the publisher), `no_verify_ssl`, `auth` and `timeout`; aio-pika `interleave` and
# `happy_eyeballs_delay` (floats it parses). nats-py reads no option.
_AMQP_OPTIONS = {
    "heartbeat": re.compile(r"[0-9]{1,5}"),
    "name": re.compile(r"[A-Za-z0-9 _.:/@-]{1,128}"),
}
_OPTIONS: dict[str, dict[str, re.Pattern[str]]] = {
    "amqp": _AMQP_OPTIONS,
    "amqps": _AMQP_OPTIONS,
    "nats": {},
    "tls": {},
}


@dataclass(frozen=True, slots=True, repr=False)
class Destination:
    """Where a broker endpoint publishes: `name` is the exchange (RabbitMQ) or subject (NATS)."""

    kind: str
    url: str
    name: str

    def __repr__(self) -> str:
        return f"Destination({self.kind}, {redact(self.url)}, {self.name})"


def redact(url: str) -> str:
    """`url` without its user name and password, to show or log."""
    try:
        return str(URL(url).with_user(None))
    except ValueError:
        return "<an unparsable URL>"


def scrub(text: str, url: str) -> str:
    """`text` with the credentials of `url` (as written and decoded) taken out."""
    try:
        parsed = URL(url)
    except ValueError:
        return text
    for secret in (parsed.raw_password, parsed.password, parsed.raw_user, parsed.user):
        if secret:
            text = text.replace(secret, "***")
    return text


def name_refusal(kind: str, name: str) -> str | None:
    """Why a `kind` endpoint may not publish to the exchange or subject `name`, or None."""
    if kind == RABBITMQ:
        if not _EXCHANGE.fullmatch(name):
            return "the exchange must be 1-255 letters, digits, '-', '_', '.' or ':'"
        if name.startswith(_RESERVED_EXCHANGE):
            return f"the exchange must not start with {_RESERVED_EXCHANGE!r} (the broker's own)"
    if kind == NATS:
        if len(name) > _MAX_SUBJECT or not _SUBJECT.fullmatch(name):
            return "the subject must be dot-separated tokens without spaces or wildcards (* >)"
        if name.startswith(_RESERVED_SUBJECTS):
            reserved = " or ".join(repr(p) for p in _RESERVED_SUBJECTS)
            return f"the subject must not start with {reserved} (the server's own subjects)"
    return None


def _plaintext_refusal(kind: str, target: URL, *, allow_private: bool) -> str | None:
    """Why a broker URL may not be used without TLS, or None: only where private ones may."""
    if allow_private or target.scheme == TLS_SCHEMES[kind]:
        return None
    return f"a {kind} URL must use {TLS_SCHEMES[kind]}:// (TLS); {ALLOW_PRIVATE_HINT}"


def _options_refusal(target: URL) -> str | None:
    """Why the query options or fragment of a broker URL are refused, or None."""
    if target.fragment:
        return "a broker URL takes no fragment (#…)"
    allowed = _OPTIONS.get(target.scheme, {})
    for option, value in target.query.items():
        pattern = allowed.get(option)
        if pattern is None:
            takes = ", ".join(f"`{o}`" for o in allowed) or "none"
            return f"the URL option {option!r} is not allowed (options allowed: {takes})"
        if not pattern.fullmatch(value):
            return f"the URL option {option!r} has an invalid value: {value!r}"
    return None


def url_refusal(kind: str, url: str, *, allow_private: bool) -> str | None:
    """Why events may not go to a `kind` broker at `url` (kind, scheme, host, options), or None."""
    if kind not in KINDS:
        return f"the kind must be one of {', '.join(KINDS)}"
    try:
        target = URL(url)
        _ = target.port
    except ValueError:
        return "not a valid URL"
    schemes = SCHEMES[kind]
    if target.scheme not in schemes:
        return f"a {kind} URL starts with {' or '.join(s + '://' for s in schemes)}"
    if not target.raw_host:
        return "the URL has no host"
    other = _options_refusal(target) or _plaintext_refusal(
        kind, target, allow_private=allow_private
    )
    if other is not None:
        return other
    return None if allow_private else host_refusal(target.raw_host)


def refusal(destination: Destination, *, allow_private: bool) -> str | None:
    """Why `destination` may not receive events (kind, scheme, host, options, name), or None."""
    return url_refusal(
        destination.kind, destination.url, allow_private=allow_private
    ) or name_refusal(destination.kind, destination.name)


def address(url: str) -> tuple[str, int]:
    """The host and port a client of `url` connects to (the scheme's port when none is given)."""
    target = URL(url)
    return target.raw_host or "", target.explicit_port or DEFAULT_PORTS[target.scheme]


@dataclass(frozen=True, slots=True, repr=False)
class Route:
    """How a client reaches a broker URL: `url` names the address vetted (the URL's own host
    when private addresses are allowed), and `host` is the name TLS verifies the server against."""

    url: str
    host: str

    @property
    def pinned(self) -> bool:
        """`url` names a vetted address instead of the host."""
        return URL(self.url).raw_host != self.host

    def __repr__(self) -> str:
        return f"Route({redact(self.url)}, {self.host})"


async def route(kind: str, url: str, *, allow_private: bool) -> Route | str:
    """Where a connection for a `kind` broker at `url` goes now, or why it may not be opened.

    Every address the host resolves to is vetted, and the client connects to the first of them
    by number: the library does not resolve the name again, so a DNS answer that changes
    between the check and the connection (rebinding) cannot lead it elsewhere. Query options
    and TLS are checked again, for URLs saved before those rules.
    """
    target = URL(url)
    other = _options_refusal(target) or _plaintext_refusal(
        kind, target, allow_private=allow_private
    )
    if other is not None:
        return other
    host, port = address(url)
    if allow_private:
        return Route(url, host)
    try:
        found = await lookup(host, port)
    except OSError as exc:
        return f"cannot resolve {host}: {exc.strerror or exc}"
    reason = addresses_refusal(found)
    if reason is not None:
        return reason
    return Route(str(URL(url).with_host(found[0])), host)
