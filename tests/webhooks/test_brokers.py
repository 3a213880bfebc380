"""The broker transport against the machine's real RabbitMQ and NATS JetStream: what a message
carries, confirms, refusals, lost connections and restarts, and credentials kept out of errors."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from broker_support import (
    NATS_URL,
    RABBITMQ_URL,
    NatsServer,
    Proxy,
    drain_queue,
    event,
    nats_stream,
    rabbitmq_exchange,
    stream_messages,
)
from support import free_port
from ustun.http.signature import Secret
from ustun.webhooks.brokers import Brokers, Destination
from ustun.webhooks.brokers.destinations import NATS, RABBITMQ
from ustun.webhooks.receiving.verify import verify
from ustun.webhooks.sending.transport import TIMED_OUT

SECRET = Secret.generate()


async def test_rabbitmq_message_is_the_signed_body_persistent_with_the_event_id() -> None:
    sent = event(SECRET, "payment.succeeded")
    async with rabbitmq_exchange() as exchange, Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(RABBITMQ, RABBITMQ_URL, exchange.name), *sent.args()
        )
        assert got.ok, got
        assert got.kind == "succeeded"
        assert got.status is None
        assert got.error is None
        assert "confirmed" in (got.response or "")
        [received] = await drain_queue(exchange.queue)
    assert received.body == sent.body
    assert received.message_id == sent.id
    assert received.routing_key == "payment.succeeded"
    assert received.delivery_mode == 2  # persistent
    assert received.content_type == "application/json"
    headers = {k: str(v) for k, v in received.headers.items()}
    assert verify(SECRET, headers, received.body)["id"] == sent.id


async def test_nats_message_is_the_signed_body_with_the_event_id_as_msg_id() -> None:
    sent = event(SECRET)
    async with (
        nats_stream() as (stream, subject),
        Brokers(timeout=5, allow_private=True) as brokers,
    ):
        got = await brokers.publish(Destination(NATS, NATS_URL, subject), *sent.args())
        assert got.ok, got
        assert f"stream {stream!r}" in (got.response or "")
        [stored] = await stream_messages(stream, subject)
    assert stored["headers"]["Nats-Msg-Id"] == sent.id  # type: ignore[index]
    assert verify(SECRET, stored["headers"], sent.body)["id"] == sent.id  # type: ignore[arg-type]
    assert stored["body"]["id"] == sent.id  # type: ignore[index]


async def test_nats_drops_a_second_publish_of_the_same_event() -> None:
    sent = event(SECRET)
    async with (
        nats_stream() as (stream, subject),
        Brokers(timeout=5, allow_private=True) as brokers,
    ):
        destination = Destination(NATS, NATS_URL, subject)
        first = await brokers.publish(destination, *sent.args())
        again = await brokers.publish(destination, *sent.args())
        assert first.ok
        assert again.ok
        assert "duplicate" in (again.response or "")
        assert len(await stream_messages(stream, subject)) == 1


async def test_a_missing_exchange_is_a_retryable_refusal_and_the_channel_recovers() -> None:
    sent = event(SECRET)
    async with rabbitmq_exchange() as exchange, Brokers(timeout=5, allow_private=True) as brokers:
        missing = Destination(RABBITMQ, RABBITMQ_URL, "ustun-test-no-such-exchange")
        refused = await brokers.publish(missing, *sent.args())
        assert not refused.ok
        assert not refused.permanent
        assert refused.kind == "failed"
        assert "NOT_FOUND" in (refused.error or "")
        ok = await brokers.publish(Destination(RABBITMQ, RABBITMQ_URL, exchange.name), *sent.args())
        assert ok.ok, ok
        assert len(await drain_queue(exchange.queue)) == 1


async def test_a_subject_no_stream_takes_is_a_retryable_refusal() -> None:
    sent = event(SECRET)
    async with Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(NATS, NATS_URL, "ustun.test.nobody.listens"), *sent.args()
        )
    assert not got.ok
    assert not got.permanent
    assert got.kind == "failed"
    assert "no JetStream stream" in (got.error or "")


@pytest.mark.parametrize(
    ("kind", "url"),
    [(RABBITMQ, "amqp://guest:guest@127.0.0.1:{port}/"), (NATS, "nats://127.0.0.1:{port}")],
)
async def test_connection_refused_is_an_error_outcome(kind: str, url: str) -> None:
    sent = event(SECRET)
    async with Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(kind, url.format(port=free_port()), "x"), *sent.args()
        )
    assert not got.ok
    assert got.kind == "error"
    assert "connect" in (got.error or "")
    assert got.latency_ms < 4000


async def test_credentials_never_appear_in_an_outcome() -> None:
    sent = event(SECRET)
    url = "amqp://guest:Sup3r-s3cret-pw@127.0.0.1:5672/"
    async with Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(Destination(RABBITMQ, url, "x"), *sent.args())
    assert not got.ok
    assert "ACCESS_REFUSED" in (got.error or "")
    assert "Sup3r-s3cret-pw" not in repr(got)


@pytest.mark.parametrize(
    ("kind", "url"),
    [(RABBITMQ, "amqps://guest:guest@localhost:5672/"), (NATS, "tls://127.0.0.1:4222")],
)
async def test_loopback_brokers_are_refused_unless_private_addresses_are_allowed(
    kind: str, url: str
) -> None:
    sent = event(SECRET)
    async with Brokers(timeout=5, allow_private=False) as brokers:
        got = await brokers.publish(Destination(kind, url, "x"), *sent.args())
    assert not got.ok
    assert (got.error or "").startswith("refused: 127.0.0.1 is a loopback address")


async def test_no_confirm_in_time_is_a_timeout() -> None:
    """A broker that accepts the connection and never answers: the publish gives up in time."""
    accepted: list[asyncio.StreamWriter] = []
    silent = await asyncio.start_server(lambda _, writer: accepted.append(writer), "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    sent = event(SECRET)
    async with silent, Brokers(timeout=0.5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(NATS, f"nats://127.0.0.1:{port}", "x"), *sent.args()
        )
        for writer in accepted:
            writer.close()
    assert not got.ok
    assert got.error == TIMED_OUT
    assert got.kind == "timeout"
    assert got.latency_ms < 2000


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_a_name_that_rebinds_to_loopback_after_the_check_is_not_followed(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the broker's name answers a public address when it is vetted, then
    127.0.0.1. The client connects to the vetted address, so nothing on loopback is reached."""
    accepted: list[asyncio.StreamWriter] = []
    local = await asyncio.start_server(lambda _, writer: accepted.append(writer), "127.0.0.1", 0)
    port = local.sockets[0].getsockname()[1]
    answers = iter(["8.8.8.8"])
    real = socket.getaddrinfo

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return real(host, *args, **kwargs)
        ip = next(answers, "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = (
        f"amqp://guest:guest@rebind.test:{port}/"
        if kind == RABBITMQ
        else f"nats://rebind.test:{port}"
    )
    async with local, Brokers(timeout=1, allow_private=False) as brokers:
        got = await brokers.publish(Destination(kind, url, "x"), *event(SECRET).args())
        for writer in accepted:
            writer.close()
    assert not got.ok
    assert accepted == []


@pytest.mark.parametrize("kind", [RABBITMQ, NATS])
async def test_a_broker_that_stops_answering_an_open_connection_times_out(kind: str) -> None:
    """The connection is open and used, then the broker goes silent: the next publish gives up
    within the timeout (the publisher bounds its own wait once connected)."""
    async with (
        Proxy(5672 if kind == RABBITMQ else 4222) as proxy,
        rabbitmq_exchange() as exchange,
        nats_stream() as (_, subject),
        Brokers(timeout=0.5, allow_private=True) as brokers,
    ):
        if kind == RABBITMQ:
            destination = Destination(RABBITMQ, proxy.url(), exchange.name)
        else:
            destination = Destination(NATS, proxy.url("nats", ""), subject)
        assert (await brokers.publish(destination, *event(SECRET).args())).ok
        proxy.freeze()
        got = await brokers.publish(destination, *event(SECRET).args())
    assert got.error == TIMED_OUT
    assert got.kind == "timeout"
    assert 400 < got.latency_ms < 2000


async def test_one_connection_per_url_reused_and_reopened_after_the_broker_drops_it() -> None:
    """RabbitMQ behind a proxy: cutting the proxy looks, to the transport, like a broker that
    went down; the shared RabbitMQ others use keeps running."""
    async with (
        Proxy(5672) as proxy,
        rabbitmq_exchange() as exchange,
        Brokers(timeout=3, allow_private=True) as brokers,
    ):
        destination = Destination(RABBITMQ, proxy.url(), exchange.name)
        events = [event(SECRET) for _ in range(9)]

        async def publish(index: int) -> bool:
            e = events[index]
            return (await brokers.publish(destination, *e.args())).ok

        assert all(await asyncio.gather(*(publish(i) for i in range(3))))
        assert proxy.accepted == 1

        await proxy.cut()
        down = await brokers.publish(destination, *events[3].args())
        assert not down.ok
        assert down.kind == "error"

        await proxy.start()
        results = [await publish(i) for i in range(3, 9)]
        assert all(results)
        assert proxy.accepted == 2
        got = await drain_queue(exchange.queue)
    assert {m.message_id for m in got} == {e.id for e in events}


async def test_nats_stopped_mid_run_then_restarted_loses_nothing(tmp_path: Path) -> None:
    """A NATS server of this test's own, stopped and started again on the same port and store:
    publishes fail while it is down and succeed after, and the stream keeps every event."""
    server = await NatsServer(tmp_path).start()
    try:
        async with (
            nats_stream(server.url) as (stream, subject),
            Brokers(timeout=2, allow_private=True) as brokers,
        ):
            destination = Destination(NATS, server.url, subject)
            events = [event(SECRET) for _ in range(6)]
            for e in events[:3]:
                assert (await brokers.publish(destination, *e.args())).ok

            await server.stop()
            down = await brokers.publish(destination, *events[3].args())
            assert not down.ok
            assert down.kind in {"error", "timeout"}

            await server.start()
            for e in events[3:]:
                got = await brokers.publish(destination, *e.args())
                assert got.ok, got
            stored = await stream_messages(stream, subject, server.url)
    finally:
        await server.stop()
    ids = [m["headers"]["Nats-Msg-Id"] for m in stored]  # type: ignore[index]
    assert ids == [e.id for e in events]


async def test_a_message_over_the_servers_limit_is_a_permanent_refusal() -> None:
    sent = event(SECRET)
    too_big = b" " * (2 * 1024 * 1024) + sent.body  # NATS takes 1 MiB by default
    async with nats_stream() as (_, subject), Brokers(timeout=5, allow_private=True) as brokers:
        got = await brokers.publish(
            Destination(NATS, NATS_URL, subject), sent.type, sent.id, too_big, sent.headers
        )
    assert not got.ok
    assert got.permanent
    assert "over the server's limit" in (got.error or "")


async def test_a_nack_is_a_retryable_refusal() -> None:
    """A queue full under `x-overflow: reject-publish` makes RabbitMQ nack the next message."""
    first, second = event(SECRET), event(SECRET)
    async with (
        rabbitmq_exchange(max_length=1) as exchange,
        Brokers(timeout=5, allow_private=True) as brokers,
    ):
        destination = Destination(RABBITMQ, RABBITMQ_URL, exchange.name)
        assert (await brokers.publish(destination, *first.args())).ok
        got = await brokers.publish(destination, *second.args())
        assert not got.ok
        assert not got.permanent
        assert got.kind == "failed"
        assert "nack" in (got.error or "")
        await drain_queue(exchange.queue)
        assert (await brokers.publish(destination, *second.args())).ok
