"""The job transition table: every legal move allowed, every other one refused with a 409."""

from __future__ import annotations

import itertools

import pytest

from ustun.errors import IllegalTransition
from ustun.jobs import states

LEGAL = {
    ("pending", "processing"),
    ("pending", "cancelled"),
    ("processing", "done"),
    ("processing", "failed"),
    ("processing", "cancelled"),
    ("processing", "pending"),
}


@pytest.mark.parametrize(("current", "target"), sorted(LEGAL))
def test_legal_transitions(current: str, target: str) -> None:
    assert states.transition(current, target) == target


@pytest.mark.parametrize(
    ("current", "target"),
    [pair for pair in itertools.product(states.STATUSES, repeat=2) if pair not in LEGAL],
)
def test_illegal_transitions_raise_state_conflict(current: str, target: str) -> None:
    with pytest.raises(IllegalTransition) as raised:
        states.transition(current, target)
    assert raised.value.slug == "state-conflict"
    assert current in raised.value.detail


def test_final_states_are_the_ones_without_exits() -> None:
    assert {s for s, exits in states.TRANSITIONS.items() if not exits} == states.FINAL


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown job status"):
        states.known("running")
