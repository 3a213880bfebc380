"""What one publish produced, in the HTTP transport's `Outcome` shape, and the two failures.

The dispatcher records a broker attempt like an HTTP one: `ok` when the broker confirmed the
message (RabbitMQ publisher confirm, JetStream PubAck); otherwise retried on the schedule,
unless `permanent` (a message the broker can never take). There is no status code: `response`
holds the broker's confirmation or refusal, `error` the reason of a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ustun.errors import UstunError
from ustun.webhooks.sending.transport import TIMED_OUT, Outcome


class BrokerRefused(UstunError):
    """The broker answered and refused the message (nack, no such exchange or stream)."""

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(reason)
        self.permanent = permanent


class BrokerUnavailable(UstunError):
    """No usable connection: it could not be opened, or it was lost; the next publish reconnects."""


@dataclass(frozen=True, slots=True)
class BrokerOutcome(Outcome):
    """An `Outcome` whose success is the broker's confirmation, not a status code."""

    confirmed: bool = False
    permanent: bool = False

    @property
    def ok(self) -> bool:
        """The broker confirmed the message (it is stored: durable exchange queue, stream)."""
        return self.confirmed

    @property
    def kind(self) -> str:
        """For metrics: `succeeded`, `failed` (the broker refused), `timeout` or `error`."""
        if self.confirmed:
            return "succeeded"
        if self.error == TIMED_OUT:
            return "timeout"
        return "failed" if self.response is not None else "error"


def confirmed(latency_ms: float, response: str) -> BrokerOutcome:
    """The broker took the message; `response` says how (stream sequence, confirm)."""
    return BrokerOutcome(None, latency_ms, response=response, confirmed=True)


def refused(latency_ms: float, exc: BrokerRefused) -> BrokerOutcome:
    """The broker answered no."""
    reason = str(exc)
    return BrokerOutcome(
        None,
        latency_ms,
        error=f"refused by the broker: {reason}",
        response=reason,
        permanent=exc.permanent,
    )


def failed(latency_ms: float, error: str) -> BrokerOutcome:
    """No answer: no connection, a lost one, or no confirmation in time (`TIMED_OUT`)."""
    return BrokerOutcome(None, latency_ms, error=error)
