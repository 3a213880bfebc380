"""Sending one signed POST with aiohttp: no redirects, a deadline, and the SSRF guard.

The guard sits in the resolver, so the addresses it vets are the ones the connector connects
to (no second lookup); IP literals, which aiohttp never resolves, are vetted before sending.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from ustun import __version__
from ustun.webhooks.addresses import forbidden_reason, url_refusal

RESPONSE_EXCERPT = 4096
USER_AGENT = f"ustun/{__version__}"


class RefusedAddress(OSError):
    """The host resolved to an address webhooks may not reach."""


class GuardedResolver(AbstractResolver):
    """Resolve with `inner`, refusing the whole host if any address it gives is forbidden."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            reason = forbidden_reason(ip_address(result["host"]))
            if reason is not None:
                raise RefusedAddress(f"refused: {host} resolves to {reason}")
        return results

    async def close(self) -> None:
        await self._inner.close()


TIMED_OUT = "timed out"

# `url_refusal` is a pure function of the URL, and a worker sends to few URLs many times.
_url_refusal = functools.lru_cache(maxsize=4096)(url_refusal)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt produced: a status code, or an error before or instead of one."""

    status: int | None
    latency_ms: float
    error: str | None = None
    response: str | None = None
    retry_after: str | None = None

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
        resolver=None if allow_private else GuardedResolver(),
        ttl_dns_cache=10,
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
) -> Outcome:
    """POST `body` to `url`; never raises for network trouble, it becomes the outcome's error."""
    started = time.perf_counter()

    def elapsed() -> float:
        return (time.perf_counter() - started) * 1000

    refusal = _url_refusal(url, allow_private=allow_private)
    if refusal is not None:
        return Outcome(None, elapsed(), error=f"refused: {refusal}")
    kwargs: dict[str, Any] = {"data": body, "headers": headers, "allow_redirects": False}
    try:
        async with http.post(url, **kwargs) as response:
            excerpt = await _excerpt(response)
            return Outcome(
                response.status,
                elapsed(),
                response=excerpt,
                retry_after=response.headers.get("retry-after"),
            )
    except TimeoutError:
        return Outcome(None, elapsed(), error=TIMED_OUT)
    except aiohttp.ClientConnectorError as exc:
        cause = exc.os_error
        message = str(cause) if isinstance(cause, RefusedAddress) else f"connection failed: {exc}"
        return Outcome(None, elapsed(), error=message)
    except (aiohttp.ClientError, asyncio.IncompleteReadError, OSError) as exc:
        return Outcome(None, elapsed(), error=f"{type(exc).__name__}: {exc}")
