"""An idempotency record's life cycle: the transition table, and what it refuses."""

from __future__ import annotations

import itertools

import pytest

from ustun.errors import IllegalTransition
from ustun.idempotency.records import TRANSITIONS, Change, State, transition


def test_a_request_claims_then_completes_and_the_record_expires() -> None:
    claimed = transition(State.ABSENT, Change.CLAIM)
    assert claimed is State.IN_PROGRESS
    assert transition(claimed, Change.TAKE_OVER) is State.IN_PROGRESS
    completed = transition(claimed, Change.COMPLETE)
    assert completed is State.COMPLETED
    assert transition(completed, Change.EXPIRE) is State.ABSENT


def test_a_claim_is_released_or_expires_and_a_settle_completes_at_once() -> None:
    assert transition(State.IN_PROGRESS, Change.RELEASE) is State.ABSENT
    assert transition(State.IN_PROGRESS, Change.EXPIRE) is State.ABSENT
    assert transition(State.ABSENT, Change.SETTLE) is State.COMPLETED


@pytest.mark.parametrize(
    ("state", "change"),
    [pair for pair in itertools.product(State, Change) if pair not in TRANSITIONS],
)
def test_every_move_outside_the_table_is_refused(state: State, change: Change) -> None:
    with pytest.raises(IllegalTransition) as refused:
        transition(state, change)
    assert refused.value.current == state
    assert refused.value.target in set(State)
    assert str(refused.value) == (
        f"The idempotency record is {state}; it cannot become {refused.value.target}."
    )


def test_a_completed_record_is_never_claimed_completed_or_released_again() -> None:
    for change in (Change.CLAIM, Change.TAKE_OVER, Change.COMPLETE, Change.RELEASE):
        with pytest.raises(IllegalTransition):
            transition(State.COMPLETED, change)
