"""`Brokers`: the broker transport of one dispatcher, the counterpart of `transport.post`.

It keeps one publisher per broker URL, opened on first use (the client library is imported
then, not before), reopened after the broker dropped it, and closed on shutdown. Publishes that
wait for the same connection share one attempt to open it. `publish` never raises for broker
trouble: like `transport.post`, it returns the outcome, with the URL's credentials scrubbed; an
error the client library was not expected to raise is a failed attempt too, logged, so a
delivery always ends in an outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Protocol

from ustun.webhooks.brokers import outcome
from ustun.webhooks.brokers.destinations import (
    NATS,
    RABBITMQ,
    Destination,
    Route,
    redact,
    route,
    scrub,
)
from ustun.webhooks.brokers.outcome import BrokerOutcome, BrokerRefused, BrokerUnavailable
from ustun.webhooks.sending.transport import TIMED_OUT

log = logging.getLogger("ustun.webhooks.brokers")


class Publisher(Protocol):
    """A connection to one broker URL that publishes and waits for the broker's confirmation,
    no longer than the `seconds` it was opened with (then `TimeoutError`)."""

    @property
    def usable(self) -> bool: ...

    async def publish(
        self,
        name: str,
        event_type: str,
        event_id: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> str: ...

    async def close(self) -> None: ...


async def _open_rabbitmq(to: Route, seconds: float) -> Publisher:
    from ustun.webhooks.brokers.amqp import AmqpPublisher

    return await AmqpPublisher.open(to, seconds)


async def _open_nats(to: Route, seconds: float) -> Publisher:
    from ustun.webhooks.brokers.jetstream import JetStreamPublisher

    return await JetStreamPublisher.open(to, seconds)


OPENERS: dict[str, Callable[[Route, float], Awaitable[Publisher]]] = {
    RABBITMQ: _open_rabbitmq,
    NATS: _open_nats,
}


class Brokers:
    """Publishers by broker URL for one dispatcher; use as `async with Brokers(...) as brokers`."""

    def __init__(self, *, timeout: float, allow_private: bool) -> None:
        self.timeout = timeout
        self.allow_private = allow_private
        self._publishers: dict[str, Publisher] = {}
        self._opening: dict[str, asyncio.Task[Publisher]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Brokers:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def publish(
        self,
        destination: Destination,
        event_type: str,
        event_id: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> BrokerOutcome:
        """Publish one event (`headers`: the signed Standard Webhooks headers) within `timeout`."""
        started = time.perf_counter()

        def elapsed() -> float:
            return (time.perf_counter() - started) * 1000

        url = destination.url
        try:
            publisher = self._publishers.get(url)
            if publisher is not None and publisher.usable:
                # The publisher bounds its own wait: no second timer per message.
                answer = await publisher.publish(
                    destination.name, event_type, event_id, body, headers
                )
            else:
                async with asyncio.timeout(self.timeout):
                    publisher = await self._publisher(destination)
                    answer = await publisher.publish(
                        destination.name, event_type, event_id, body, headers
                    )
        except TimeoutError:
            return outcome.failed(elapsed(), TIMED_OUT)
        except BrokerRefused as exc:
            reason = BrokerRefused(scrub(str(exc), url), permanent=exc.permanent)
            return outcome.refused(elapsed(), reason)
        except BrokerUnavailable as exc:
            self._forget(url)
            return outcome.failed(elapsed(), scrub(str(exc), url))
        except Exception as exc:
            self._forget(url)
            log.error(
                "publishing to %s %s failed unexpectedly: %s",
                destination.kind,
                redact(url),
                scrub(f"{type(exc).__name__}: {exc}", url),
            )
            # Only the type: the text may say what the client read (files of this server).
            return outcome.failed(
                elapsed(), f"the {destination.kind} client failed ({type(exc).__name__})"
            )
        return outcome.confirmed(elapsed(), answer)

    async def _publisher(self, destination: Destination) -> Publisher:
        """The open publisher for the destination's URL, opening it (once for all waiters)."""
        url = destination.url
        publisher = self._publishers.get(url)
        if publisher is not None and publisher.usable:
            return publisher
        self._forget(url)
        opening = self._opening.get(url)
        if opening is None:
            opening = self._opening[url] = asyncio.create_task(self._open(destination))
            opening.add_done_callback(functools.partial(self._opened, url))
        return await asyncio.shield(opening)

    def _opened(self, url: str, opening: asyncio.Task[Publisher]) -> None:
        """An attempt to open `url` ended. Its failure is retrieved here: every publish waiting
        for it may have given up first (their deadline is shorter than a connect can take), and
        asyncio would then log it as never retrieved."""
        self._opening.pop(url, None)
        if not opening.cancelled():
            opening.exception()

    async def _open(self, destination: Destination) -> Publisher:
        to = await route(destination.kind, destination.url, allow_private=self.allow_private)
        if isinstance(to, str):
            raise BrokerUnavailable(f"refused: {to}")
        publisher = await OPENERS[destination.kind](to, self.timeout)
        self._publishers[destination.url] = publisher
        log.info("connected to %s %s", destination.kind, redact(destination.url))
        return publisher

    def _forget(self, url: str) -> None:
        """Drop the URL's publisher, closing it in the background (it may be half gone)."""
        publisher = self._publishers.pop(url, None)
        if publisher is not None:
            log.info("lost the connection to %s", redact(url))
            task = asyncio.create_task(_close_quietly(publisher))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every connection (call on shutdown)."""
        opening = list(self._opening.values())
        for task in opening:
            task.cancel()
        await asyncio.gather(*opening, return_exceptions=True)
        publishers, self._publishers = list(self._publishers.values()), {}
        await asyncio.gather(*(_close_quietly(p) for p in publishers), *self._closing)


async def _close_quietly(publisher: Publisher) -> None:
    with contextlib.suppress(Exception):
        await publisher.close()
