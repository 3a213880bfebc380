"""Publishing to RabbitMQ (AMQP 0-9-1) with aio-pika: one connection and confirm channel per URL.

A message goes to the endpoint's exchange with the event type as routing key, persistent
(delivery mode 2), the event id as `message_id` and the Standard Webhooks headers as AMQP
headers; `publish` returns once the broker has confirmed it (publisher confirms). The exchange
is the operator's to declare: publishing to a missing one is refused (404), not created.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from yarl import URL

from ustun.webhooks.brokers.destinations import Route
from ustun.webhooks.brokers.outcome import BrokerRefused, BrokerUnavailable

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractConnection

CONTENT_TYPE = "application/json"
CONNECTION_NAME = "ustun webhooks"


class AmqpPublisher:
    """A connection to one RabbitMQ URL with a publisher-confirm channel, reopened when closed."""

    def __init__(
        self, connection: AbstractConnection, channel: AbstractChannel, seconds: float
    ) -> None:
        self._connection = connection
        self._channel = channel
        self._reopening = asyncio.Lock()
        self._seconds = seconds

    @classmethod
    async def open(cls, to: Route, seconds: float) -> AmqpPublisher:
        """Connect within `seconds` and open the confirm channel; `BrokerUnavailable` on failure.

        TLS (`amqps://`) verifies the server against the URL's host, also when `to` connects
        to an address by number."""
        import aio_pika
        from aiormq.exceptions import AMQPError

        # aio-pika hands extra options down to `asyncio.open_connection`.
        tls_name: dict[str, Any] = (
            {"server_hostname": to.host} if to.pinned and _tls(to.url) else {}
        )
        try:
            connection = await aio_pika.connect(
                to.url,
                timeout=seconds,
                client_properties={"connection_name": CONNECTION_NAME},
                **tls_name,
            )
            channel = await connection.channel(publisher_confirms=True)
        except (AMQPError, OSError) as exc:
            raise BrokerUnavailable(f"cannot connect to RabbitMQ: {exc}") from None
        return cls(connection, channel, seconds)

    @property
    def usable(self) -> bool:
        """The connection is open (a closed channel alone is reopened on the next publish)."""
        return not self._connection.is_closed

    async def _open_channel(self) -> AbstractChannel:
        """The confirm channel; a channel error (say, a missing exchange) closed the last one."""
        async with self._reopening:
            if self._channel.is_closed:
                try:
                    self._channel = await self._connection.channel(publisher_confirms=True)
                except RuntimeError as exc:  # aiormq: the connection closed under it
                    raise BrokerUnavailable(f"RabbitMQ connection lost: {exc}") from None
            return self._channel

    async def publish(
        self,
        exchange: str,
        event_type: str,
        event_id: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> str:
        """Publish and wait for the confirm, within the `seconds` given to `open`; its text.

        Raises `BrokerRefused` (nack, a channel error such as a missing exchange),
        `BrokerUnavailable` (the connection is gone) or `TimeoutError`.
        """
        import aio_pika
        from aiormq.exceptions import (
            AMQPChannelError,
            AMQPConnectionError,
            ChannelInvalidStateError,
            DeliveryError,
        )

        message = aio_pika.Message(
            body,
            headers=dict(headers),
            content_type=CONTENT_TYPE,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=event_id,
            type=event_type,
        )
        try:
            async with asyncio.timeout(self._seconds):
                channel = await self._open_channel()
                target = await channel.get_exchange(exchange, ensure=False)
                await target.publish(message, event_type, mandatory=False)
        except DeliveryError:
            raise BrokerRefused("RabbitMQ did not confirm the message (nack)") from None
        except AMQPChannelError as exc:
            raise BrokerRefused(str(exc)) from None
        except (AMQPConnectionError, ChannelInvalidStateError, ConnectionError) as exc:
            raise BrokerUnavailable(f"RabbitMQ connection lost: {exc}") from None
        return f"confirmed by RabbitMQ: exchange {exchange!r}, routing key {event_type!r}"

    async def close(self) -> None:
        """Close the connection (and its channel)."""
        await self._connection.close()


def _tls(url: str) -> bool:
    return URL(url).scheme == "amqps"
