"""Broker consumers: events from a RabbitMQ queue or a JetStream consumer, into the same inbox
and the same `Handlers` as the HTTP receiver, so each event runs its handler once.

    handlers = Handlers()
    inbox = DatabaseInbox(db)
    await consume_rabbitmq("amqp://…", "payments", inbox, handlers, secret="whsec_…")
    await consume_nats("nats://…", "events.payments", "billing", inbox, handlers, secret="whsec_…")

Each message is verified (with a secret), claimed in the inbox by its event id, handled (retried
as `Handlers` does), and acknowledged only after the inbox has recorded it; a copy of an event
whose handler finished is acknowledged without running anything, a message that fails
verification is rejected. A message whose handler gave up (every attempt failed) is not
acknowledged: it goes back to the broker to come again once the inbox's `lease` has passed, when
the inbox lets its id be claimed again, so the handler runs again then, until it succeeds (NATS:
a nak delayed by the lease; RabbitMQ, which cannot delay a nack: the message is held
unacknowledged that long, then requeued). So does a message whose event is claimed and not yet
handled: its claimant may have died mid-handler (the broker redelivers its message at once on
RabbitMQ, after `ack_wait` on JetStream: both within the default lease), and acknowledged, the
event would be lost. Queued messages may be old, so the signature's timestamp is not checked
unless `tolerance` is given.
The queue or stream is the operator's to create; both functions run until cancelled, riding
out broker restarts (aio-pika's robust connection, nats-py's reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from ustun.defaults import DEFAULT_CONSUMER_PREFETCH
from ustun.http.signature import ID_HEADER, Verifier, verifiers
from ustun.webhooks.brokers.destinations import redact
from ustun.webhooks.brokers.jetstream import MSG_ID_HEADER
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.receiving.inbox import Inbox
from ustun.webhooks.receiving.verify import verify_delivery

if TYPE_CHECKING:
    from aio_pika.abc import AbstractIncomingMessage
    from nats.aio.msg import Msg

# How long a stopping consumer waits for the broker to say goodbye.
CLOSE_WAIT = 5.0
log = logging.getLogger("ustun.webhooks.receiving.consumers")

Secrets = Verifier | str | Iterable[Verifier | str]
FETCH_WAIT = 1.0
# After a failed fetch, or before handing back a message the inbox could not take (database down).
PAUSE = 0.5
# Added to the inbox's lease before a message whose handler gave up comes again, so that its
# claim has surely lapsed (clocks of several consumers may differ a little).
RETRY_MARGIN = 1.0


class Outcome(Enum):
    """What a consumer tells the broker about one message."""

    ACK = "ack"  # handled, now or before: forget it
    REJECT = "reject"  # cannot be verified or read: never deliver it again
    # The handler gave up, or the event is claimed but not handled (its claim may be of a
    # consumer that died): deliver it again after `Intake.retry_delay`.
    RETRY = "retry"


class Intake:
    """What every consumer does with one message: verify, claim, handle; the `Outcome` says what
    to tell the broker."""

    def __init__(
        self, inbox: Inbox, handlers: Handlers, secret: Secrets | None, tolerance: float
    ) -> None:
        self.inbox = inbox
        self.handlers = handlers
        self.secrets = None if secret is None else verifiers(secret)
        self.tolerance = tolerance
        self._prepared = False

    @property
    def retry_delay(self) -> float:
        """Seconds before a message whose handler gave up may come again: the inbox's lease
        (sooner, its claim would still hold and the message would pass for a duplicate)."""
        return self.inbox.lease + RETRY_MARGIN

    def _read(
        self, headers: Mapping[str, str], body: bytes, message_id: str | None
    ) -> tuple[str, dict[str, Any]]:
        """The event id and the event; `SignatureError` or `ValueError` when the message cannot be
        trusted or read."""
        if self.secrets is not None:
            delivery = verify_delivery(self.secrets, headers, body, self.tolerance)
            return delivery.id, delivery.event
        event = json.loads(body)
        if not isinstance(event, dict):
            raise ValueError("the body is not a JSON object")
        event_id = headers.get(ID_HEADER) or message_id or event.get("id")
        if not isinstance(event_id, str) or not event_id:
            raise ValueError("the message carries no event id")
        return event_id, event

    async def take(
        self, headers: Mapping[str, str], body: bytes, message_id: str | None
    ) -> Outcome:
        """Handle the message unless its id is claimed; acknowledge a claimed one only when its
        handler finished, else hand it back until the claim lapses."""
        try:
            event_id, event = self._read(headers, body, message_id)
        except Exception as exc:
            # Reading touches nothing but the message: what fails once fails on every
            # redelivery (a bad signature, an absurd header, JSON nested too deep), so requeued
            # it would come back forever.
            log.warning("rejected a broker message %s: %s: %s", message_id, type(exc).__name__, exc)
            return Outcome.REJECT
        if not self._prepared:
            await self.inbox.prepare()
            self._prepared = True
        event_type = str(event.get("type", ""))
        if not await self.inbox.claim(event_id, event_type):
            if await self.inbox.handled(event_id):
                return Outcome.ACK
            log.info(
                "event %s is claimed, not handled; it comes again in %.1f s",
                event_id,
                self.retry_delay,
            )
            return Outcome.RETRY
        if await self.handlers.handle(self.inbox, event_id, event_type, event):
            return Outcome.ACK
        log.warning("event %s handed back; it comes again in %.1f s", event_id, self.retry_delay)
        return Outcome.RETRY


def _text_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """AMQP header values as text (a table may hold bytes for long strings)."""
    return {
        name: value.decode() if isinstance(value, bytes) else str(value)
        for name, value in headers.items()
    }


async def consume_rabbitmq(
    url: str,
    queue: str,
    inbox: Inbox,
    handlers: Handlers,
    *,
    secret: Secrets | None = None,
    tolerance: float = math.inf,
    prefetch: int = DEFAULT_CONSUMER_PREFETCH,
) -> None:
    """Consume `queue` (declared and bound by the operator) until cancelled.

    Up to `prefetch` messages are handled at once; an unacknowledged one returns to the queue
    when the connection drops; its redelivery is acknowledged if the inbox says its handler
    finished, else it waits out the claim's lease like a message whose handler gave up, keeping
    its place among the `prefetch` until it is requeued.
    """
    import aio_pika

    intake = Intake(inbox, handlers, secret, tolerance)

    async def on_message(message: AbstractIncomingMessage) -> None:
        # aio-pika runs each delivery's callback in a task of its own (cancelled when the channel
        # closes), so a message waiting here holds up no other.
        try:
            outcome = await intake.take(
                _text_headers(message.headers), message.body, message.message_id
            )
        except Exception:
            log.exception("the inbox could not take message %s; requeued", message.message_id)
            await asyncio.sleep(PAUSE)
            await message.nack(requeue=True)
            return
        if outcome is Outcome.ACK:
            await message.ack()
        elif outcome is Outcome.REJECT:
            await message.reject(requeue=False)
        else:
            await asyncio.sleep(intake.retry_delay)
            await message.nack(requeue=True)

    connection = await aio_pika.connect_robust(url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=prefetch)
        source = await channel.get_queue(queue, ensure=True)
        await source.consume(on_message)
        log.info("consuming %s queue %r", redact(url), queue)
        await asyncio.Future()  # until cancelled


async def consume_nats(
    url: str,
    subject: str,
    durable: str,
    inbox: Inbox,
    handlers: Handlers,
    *,
    stream: str | None = None,
    secret: Secrets | None = None,
    tolerance: float = math.inf,
    batch: int = DEFAULT_CONSUMER_PREFETCH,
) -> None:
    """Pull `subject` through the durable consumer `durable` (created if missing) of the stream
    that holds the subject (or `stream`) until cancelled; up to `batch` messages at once."""
    import nats
    from nats.errors import Error as NatsError

    intake = Intake(inbox, handlers, secret, tolerance)

    async def one(message: Msg) -> None:
        headers = message.headers or {}
        try:
            outcome = await intake.take(headers, message.data, headers.get(MSG_ID_HEADER))
        except Exception:
            log.exception("the inbox could not take a message; it will be redelivered")
            await message.nak(delay=PAUSE)
            return
        if outcome is Outcome.ACK:
            await message.ack()
        elif outcome is Outcome.REJECT:
            await message.term()
        else:
            await message.nak(delay=intake.retry_delay)

    task = asyncio.current_task()
    assert task is not None  # a coroutine run by the event loop
    client = await nats.connect(url, max_reconnect_attempts=-1)
    pull = None
    try:
        pull = await client.jetstream().pull_subscribe(subject, durable, stream=stream)
        log.info("consuming %s subject %r as %r", redact(url), subject, durable)
        while True:
            # Python 3.11's `wait_for`, inside nats-py's fetch, can swallow a cancellation that
            # lands as its wait ends: the request to stop is still on the task, so end here.
            if task.cancelling():
                raise asyncio.CancelledError
            try:
                messages = await pull.fetch(batch, timeout=FETCH_WAIT)
            except TimeoutError:  # nats-py raises its own and, on some paths, asyncio's
                continue
            except NatsError as exc:
                log.warning("fetching from %s failed: %s", redact(url), type(exc).__name__)
                await asyncio.sleep(PAUSE)
                continue
            await asyncio.gather(*(one(m) for m in messages))
    finally:
        # The pull subscription's own tasks end with it, before the connection closes: left to
        # the closing loop, they could keep its shutdown waiting.
        if pull is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pull.unsubscribe(), CLOSE_WAIT)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), CLOSE_WAIT)
