"""What one attempt's outcome means for its delivery: the dispatcher's classification, pure.

A receiver may stop the retries of the delivery it was just sent by answering a non-2xx status
with `Webhook-Delivery: abort-message`: the delivery is dead at once and its endpoint stays
enabled. The header and its value are Svix's (its "delivery control", the Standard Webhooks
`webhook-` header family), so a receiver written for Svix works unchanged. The value is compared
case-insensitively, as a comma-separated list (a repeated header is one such list); other values
(Svix's `disable` among them: a `410 Gone` disables an endpoint here) are ignored.
"""

from __future__ import annotations

from enum import StrEnum

from ustun.webhooks.brokers.outcome import BrokerOutcome
from ustun.webhooks.sending.transport import DELIVERY_HEADER, Outcome

ABORT_MESSAGE = "abort-message"
# The error an aborted attempt is recorded with: its status code alone reads as a failure.
ABORTED_BY_RECEIVER = f"aborted by receiver ({DELIVERY_HEADER}: {ABORT_MESSAGE})"


class Verdict(StrEnum):
    """What becomes of a delivery after one attempt."""

    SUCCEEDED = "succeeded"  # a 2xx (or the broker's confirmation)
    GONE = "gone"  # 410: dead, and its endpoint is disabled
    ABORTED = "aborted"  # non-2xx with `Webhook-Delivery: abort-message`: dead, endpoint kept
    REFUSED = "refused"  # a message the broker can never take: dead
    RETRY = "retry"  # any other failure: retried on the schedule, dead when it runs out


def aborts(header: str | None) -> bool:
    """Whether a `Webhook-Delivery` header's value asks for no more retries."""
    if header is None:
        return False
    return any(token.strip().lower() == ABORT_MESSAGE for token in header.split(","))


def verdict(outcome: Outcome) -> Verdict:
    """Classify an attempt's outcome; success wins over the header, and 410 over an abort."""
    if outcome.ok:
        return Verdict.SUCCEEDED
    if outcome.status == 410:
        return Verdict.GONE
    if outcome.status is not None and aborts(outcome.delivery):
        return Verdict.ABORTED
    if isinstance(outcome, BrokerOutcome) and outcome.permanent:
        return Verdict.REFUSED
    return Verdict.RETRY
