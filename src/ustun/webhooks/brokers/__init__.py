"""Broker destinations: webhook events published to RabbitMQ or NATS JetStream.

A broker endpoint is another transport of the webhooks pillar: the dispatcher hands a claimed
delivery to `Brokers.publish` instead of `transport.post` and records the `BrokerOutcome` the
same way. The client libraries (`pip install ustun[brokers]`: aio-pika, nats-py) are imported
only when a connection is opened, so importing this package needs neither.
"""

from ustun.webhooks.brokers.destinations import KINDS, NATS, RABBITMQ, Destination, redact, refusal
from ustun.webhooks.brokers.outcome import BrokerOutcome
from ustun.webhooks.brokers.pool import Brokers

__all__ = [
    "KINDS",
    "NATS",
    "RABBITMQ",
    "BrokerOutcome",
    "Brokers",
    "Destination",
    "redact",
    "refusal",
]
