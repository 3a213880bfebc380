"""Broker destinations: which kinds, URLs and names are accepted, the SSRF rules of webhook URLs
applied to broker hosts, and URLs shown without their credentials."""

from __future__ import annotations

import pytest

from ssrf_spellings import SPELLINGS
from ustun.webhooks.brokers.destinations import (
    NATS,
    RABBITMQ,
    Destination,
    Route,
    address,
    redact,
    refusal,
    route,
    scrub,
)


@pytest.mark.parametrize(
    ("kind", "url", "name"),
    [
        (RABBITMQ, "amqps://user:pw@broker.example.com/", "events"),
        (RABBITMQ, "amqps://user:pw@broker.example.com:5673/vhost", "payments.events:v1"),
        (NATS, "tls://broker.example.com:4222", "events.payments"),
        (NATS, "tls://token@broker.example.com", "a.b-c_d.E"),
        (RABBITMQ, "amqps://8.8.8.8/", "mine.amq.topic"),
        (RABBITMQ, "amqps://8.8.8.8/vh?heartbeat=30&name=relay%20one", "events"),
        (NATS, "tls://broker.example.com/", "JS.events.$x"),
    ],
)
def test_public_brokers_are_accepted(kind: str, url: str, name: str) -> None:
    assert refusal(Destination(kind, url, name), allow_private=False) is None


@pytest.mark.parametrize(
    ("kind", "url", "name", "reason"),
    [
        ("kafka", "kafka://broker.example.com", "x", "kind must be one of rabbitmq, nats"),
        (RABBITMQ, "nats://broker.example.com", "x", "starts with amqp:// or amqps://"),
        (NATS, "https://broker.example.com", "x", "starts with nats:// or tls://"),
        (RABBITMQ, "amqp:///vhost", "x", "no host"),
        (RABBITMQ, "amqp://broker.example.com:99999/", "x", "not a valid URL"),
        (RABBITMQ, "amqps://broker.example.com/", "", "the exchange must be"),
        (RABBITMQ, "amqps://broker.example.com/", "bad name", "the exchange must be"),
        (RABBITMQ, "amqps://broker.example.com/", "x" * 256, "the exchange must be"),
        (NATS, "tls://broker.example.com", "events.*", "the subject must be"),
        (NATS, "tls://broker.example.com", "events.>", "the subject must be"),
        (NATS, "tls://broker.example.com", "events..payments", "the subject must be"),
        (NATS, "tls://broker.example.com", "events payments", "the subject must be"),
        (NATS, "tls://broker.example.com", "", "the subject must be"),
        (RABBITMQ, "amqps://guest:guest@127.0.0.1:5671/", "x", "127.0.0.1 is a loopback address"),
        (NATS, "tls://10.0.0.7:4222", "x", "10.0.0.7 is a private address"),
        (NATS, "tls://localhost:4222", "x", "loopback name"),
        (RABBITMQ, "amqp://u:p@broker.example.com/", "x", "must use amqps:// (TLS)"),
        (NATS, "nats://broker.example.com", "events", "must use tls:// (TLS)"),
        (NATS, "nats://8.8.8.8:4222", "events", "USTUN_WEBHOOK_ALLOW_PRIVATE=1"),
        (RABBITMQ, "amqps://169.254.169.254/", "x", "link-local"),
    ],
)
def test_refused_destinations_say_why(kind: str, url: str, name: str, reason: str) -> None:
    got = refusal(Destination(kind, url, name), allow_private=False)
    assert got is not None
    assert reason in got


@pytest.mark.parametrize(("host", "meaning"), SPELLINGS)
def test_every_ssrf_spelling_is_refused_as_a_broker_host(host: str, meaning: str) -> None:
    got = refusal(Destination(NATS, f"tls://{host}:4222", "events"), allow_private=False)
    assert got is not None, host


def test_allowing_private_addresses_allows_loopback_brokers() -> None:
    for destination in (
        Destination(RABBITMQ, "amqp://guest:guest@127.0.0.1:5672/", "x"),
        Destination(NATS, "nats://localhost:4222", "x"),
    ):
        assert refusal(destination, allow_private=True) is None


async def test_a_name_that_resolves_to_a_refused_address_is_refused_before_connecting() -> None:
    got = await route(NATS, "tls://localhost:4222", allow_private=False)
    assert isinstance(got, str)
    assert "is a loopback address" in got
    assert await route(NATS, "nats://localhost:4222", allow_private=True) == Route(
        "nats://localhost:4222", "localhost"
    )


async def test_a_vetted_route_names_the_address_and_keeps_the_host_for_tls() -> None:
    """The client is handed the address that was vetted, by number (credentials, port and path
    kept): it has no name left to resolve again."""
    got = await route(RABBITMQ, "amqps://u:p@8.8.8.8:5671/vh", allow_private=False)
    assert got == Route("amqps://u:p@8.8.8.8:5671/vh", "8.8.8.8")
    assert not got.pinned
    assert "u:p" not in repr(got)


async def test_a_plaintext_url_saved_before_the_tls_rule_is_refused_before_connecting() -> None:
    got = await route(RABBITMQ, "amqp://u:p@8.8.8.8:5672/vh", allow_private=False)
    assert got == (
        "a rabbitmq URL must use amqps:// (TLS); the server setting "
        "USTUN_WEBHOOK_ALLOW_PRIVATE=1 allows plain http and private addresses for development "
        "(it takes effect when the server restarts)"
    )


def test_default_ports_follow_the_scheme() -> None:
    assert address("amqp://h/") == ("h", 5672)
    assert address("amqps://h/") == ("h", 5671)
    assert address("nats://h") == ("h", 4222)
    assert address("tls://h:7422") == ("h", 7422)


def test_credentials_are_never_shown() -> None:
    url = "amqp://us%40er:p%3Ass-w0rd@broker.example.com:5672/vh"
    assert redact(url) == "amqp://broker.example.com:5672/vh"
    assert "w0rd" not in repr(Destination(RABBITMQ, url, "x"))
    text = "login p:ss-w0rd (p%3Ass-w0rd) refused for us@er"
    assert scrub(text, url) == "login *** (***) refused for ***"
