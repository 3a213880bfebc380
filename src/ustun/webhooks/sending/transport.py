"""Sending one signed POST with aiohttp: no redirects, a deadline, and the SSRF guard.

The guard has two layers. Before sending, the URL is parsed with yarl into the very `URL`
object aiohttp is handed, and its host is vetted (`url_refusal`). Then every socket the
connector opens is vetted in its socket factory, with the numeric address it is about to
connect to: IP literals, resolved names, cached lookups and every happy-eyeballs attempt all
pass through it, so no TCP connection to a refused address is ever opened.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from ustun import __version__
from ustun.errors import RefusedAddress
from ustun.webhooks.addresses import address_refusal, url_refusal

RESPONSE_EXCERPT = 4096
USER_AGENT = f"ustun/{__version__}"


def guarded_socket(addr_info: aiohttp.AddrInfoType) -> socket.socket:
    """The connector's socket factory: a socket for `addr_info`, unless its address is refused.

    aiohttp calls it for each address it then connects to, so this sees the real destination.
    """
    family, kind, proto, _, address = addr_info
    reason = address_refusal(address[0])
    if reason is not None:
        raise RefusedAddress(reason)
    return socket.socket(family, kind, proto)


TIMED_OUT = "timed out"
# The answer header a receiver stops a delivery's retries with (`verdict` reads its value).
DELIVERY_HEADER = "webhook-delivery"


@functools.lru_cache(maxsize=4096)
def target(url: str, allow_private: bool) -> URL | str:
    """`url` as the `URL` aiohttp will use, or why it is refused (cached: few URLs, many sends)."""
    refusal = url_refusal(url, allow_private=allow_private)
    return URL(url) if refusal is None else refusal


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt produced: a status code, or an error before or instead of one."""

    status: int | None
    latency_ms: float
    error: str | None = None
    response: str | None = None
    retry_after: str | None = None
    # The answer's `Webhook-Delivery` header (repeats joined by commas): see `verdict`.
    delivery: str | None = None

    @property
    def ok(self) -> bool:
        """Success is any 2xx within the timeout."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def kind(self) -> str:
        """For metrics: `succeeded`, `failed` (a non-2xx answer), `timeout` or `error`."""
        if self.status is not None:
            return "succeeded" if self.ok else "failed"
        return "timeout" if self.error == TIMED_OUT else "error"


def session(*, timeout: float, allow_private: bool, limit: int) -> aiohttp.ClientSession:
    """The one shared session of a dispatcher."""
    connector = aiohttp.TCPConnector(
        limit=limit,
        limit_per_host=0,
        ttl_dns_cache=10,
        socket_factory=None if allow_private else guarded_socket,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"user-agent": USER_AGENT, "content-type": "application/json"},
        auto_decompress=False,
    )


async def _excerpt(response: aiohttp.ClientResponse) -> str:
    """The body's first 4 KiB as text a database can store (PostgreSQL text refuses NUL)."""
    chunks: list[bytes] = []
    size = 0
    while size < RESPONSE_EXCERPT:
        chunk = await response.content.read(RESPONSE_EXCERPT - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace").replace("\x00", "\ufffd")


async def post(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allow_private: bool,
    tls: ssl.SSLContext | None = None,
) -> Outcome:
    """POST `body` to `url` (with the endpoint's own TLS context, if it has one: a client
    certificate, trusted authorities); never raises for network trouble, it becomes the
    outcome's error."""
    started = time.perf_counter()

    def elapsed() -> float:
        return (time.perf_counter() - started) * 1000

    checked = target(url, allow_private)
    if isinstance(checked, str):
        return Outcome(None, elapsed(), error=f"refused: {checked}")
    kwargs: dict[str, Any] = {"data": body, "headers": headers, "allow_redirects": False}
    if tls is not None:
        kwargs["ssl"] = tls
    try:
        async with http.post(checked, **kwargs) as response:
            excerpt = await _excerpt(response)
            return Outcome(
                response.status,
                elapsed(),
                response=excerpt,
                retry_after=response.headers.get("retry-after"),
                delivery=",".join(response.headers.getall(DELIVERY_HEADER, [])) or None,
            )
    except TimeoutError:
        return Outcome(None, elapsed(), error=TIMED_OUT)
    except aiohttp.ClientConnectorError as exc:
        cause = exc.os_error
        refused = isinstance(cause, RefusedAddress)
        message = cause.strerror if refused else f"connection failed: {exc}"
        return Outcome(None, elapsed(), error=message)
    except (aiohttp.ClientError, asyncio.IncompleteReadError, OSError) as exc:
        return Outcome(None, elapsed(), error=f"{type(exc).__name__}: {exc}")
