"""Publishing to NATS JetStream with nats-py: one connection per URL, each message acknowledged.

A message goes to the endpoint's subject with `Nats-Msg-Id` = the event id, so the stream drops a
second copy within its duplicate window (a retry after a lost PubAck), and the Standard Webhooks
headers; `publish` returns once the stream's PubAck arrives. The stream is the operator's to
create: a subject no stream listens on is refused (no responders), not created.

The client's own reconnect is off: it would follow the cluster addresses a server advertises,
which the SSRF rules never vetted. A lost connection is reopened by the pool on its next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from yarl import URL

from ustun.webhooks.brokers.destinations import Route
from ustun.webhooks.brokers.outcome import BrokerRefused, BrokerUnavailable

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

MSG_ID_HEADER = "Nats-Msg-Id"
CONTENT_TYPE_HEADER = "Content-Type"
CONTENT_TYPE = "application/json"
CONNECTION_NAME = "ustun webhooks"
# How long a failed connect's close may wait for its socket to finish closing (seconds).
CLOSE_WAIT = 0.5


async def _ignore(_: Exception) -> None:
    """nats-py's error callback; failures reach the publisher as exceptions (logged scrubbed)."""


def nats_options(to: Route, seconds: float) -> dict[str, object]:
    """`nats.connect` options for one route: no reconnect, TLS required for `tls://` (verified
    against the URL's host), quiet."""
    return {
        "servers": [to.url],
        "name": CONNECTION_NAME,
        "allow_reconnect": False,
        # The first connect walks the server list until `max_reconnect_attempts` (> 0) is passed;
        # 1 with no wait makes a refused connection fail at once (after two tries).
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0,
        "connect_timeout": max(1, math.ceil(seconds)),
        "error_cb": _ignore,
        "tls": ssl.create_default_context() if URL(to.url).scheme == "tls" else None,
        "tls_hostname": to.host,
    }


class _Errors(NamedTuple):
    """The nats-py exceptions `publish` tells apart, imported once, with the client: an import
    statement per message cost about 1.7 µs, 3 % of a relayed event's CPU."""

    no_stream: type[Exception]
    too_big: type[Exception]
    refused: type[Exception]
    timed_out: type[Exception]
    lost: tuple[type[Exception], ...]


def _errors() -> _Errors:
    from nats.errors import ConnectionClosedError, MaxPayloadError, StaleConnectionError
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.errors import APIError, NoStreamResponseError

    lost = (ConnectionClosedError, StaleConnectionError, OSError)
    return _Errors(NoStreamResponseError, MaxPayloadError, APIError, NatsTimeout, lost)


class JetStreamPublisher:
    """A connection to one NATS URL and its JetStream context."""

    def __init__(self, client: Client, stream: JetStreamContext) -> None:
        self._client = client
        self._stream = stream
        self._errors = _errors()

    @classmethod
    async def open(cls, to: Route, seconds: float) -> JetStreamPublisher:
        """Connect within `seconds` (also the PubAck wait); `BrokerUnavailable` on failure."""
        from nats.aio.client import Client
        from nats.errors import Error

        client = Client()
        try:
            await client.connect(**nats_options(to, seconds))  # type: ignore[arg-type]
        except BaseException as exc:
            # A connect cut short (error, timeout, cancellation) leaves its socket open. The close
            # shuts it at once, then waits for it to finish closing: after a failed TLS handshake
            # that wait never ends, so it is cut short.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_WAIT):
                    await client.close()
            if isinstance(exc, Error | OSError | TimeoutError):
                raise BrokerUnavailable(
                    f"cannot connect to NATS: {type(exc).__name__}: {exc}"
                ) from None
            raise
        return cls(client, client.jetstream(timeout=seconds))

    @property
    def usable(self) -> bool:
        """The connection is open."""
        return self._client.is_connected

    async def publish(
        self,
        subject: str,
        event_type: str,
        event_id: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> str:
        """Publish and wait for the PubAck (no longer than `open`'s `seconds`); its text, or
        `BrokerRefused`, `BrokerUnavailable`, `TimeoutError`."""
        errors = self._errors
        sent = {**headers, MSG_ID_HEADER: event_id, CONTENT_TYPE_HEADER: CONTENT_TYPE}
        try:
            ack = await self._stream.publish(subject, body, headers=sent)
        except errors.no_stream:
            raise BrokerRefused(f"no JetStream stream takes the subject {subject!r}") from None
        except errors.too_big as exc:
            raise BrokerRefused(
                f"the message is over the server's limit: {exc}", permanent=True
            ) from None
        except errors.refused as exc:
            raise BrokerRefused(f"JetStream refused the message: {exc}") from None
        except errors.timed_out:
            raise TimeoutError from None
        except errors.lost as exc:
            raise BrokerUnavailable(f"NATS connection lost: {type(exc).__name__}: {exc}") from None
        duplicate = " (a duplicate, already stored)" if ack.duplicate else ""
        return f"stored by JetStream: stream {ack.stream!r}, sequence {ack.seq}{duplicate}"

    async def close(self) -> None:
        """Close the connection."""
        await self._client.close()
