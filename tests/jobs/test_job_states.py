"""The job transition table: every legal change allowed, every other one refused with a 409."""

from __future__ import annotations

import itertools

import pytest

from ustun.errors import IllegalTransition
from ustun.jobs import states
from ustun.jobs.states import Change

LEGAL = {
    ("pending", Change.CLAIM): "processing",
    ("pending", Change.CANCEL): "cancelled",
    ("processing", Change.SUCCEED): "done",
    ("processing", Change.FAIL): "failed",
    ("processing", Change.CANCEL): "cancelled",
    ("processing", Change.RELEASE): "pending",
}


@pytest.mark.parametrize(("current", "change"), sorted(LEGAL))
def test_legal_transitions(current: str, change: Change) -> None:
    assert states.transition(current, change) == LEGAL[(current, change)]


@pytest.mark.parametrize(
    ("current", "change"),
    [pair for pair in itertools.product(states.STATUSES, Change) if pair not in LEGAL],
)
def test_illegal_transitions_raise_state_conflict(current: str, change: Change) -> None:
    with pytest.raises(IllegalTransition) as raised:
        states.transition(current, change)
    assert raised.value.slug == "state-conflict"
    assert current in raised.value.detail


def test_final_states_are_the_ones_without_exits() -> None:
    assert {"done", "failed", "cancelled"} == states.FINAL


def test_each_status_is_reached_by_one_change() -> None:
    for change, target in {change: t for (_, change), t in LEGAL.items()}.items():
        assert states.CHANGE_TO[target] is change


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown job status"):
        states.known("running")
