"""The retry decision and the backoff schedule: tables for the rules, properties for the numbers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.defaults import DEFAULT_BACKOFF_ATTEMPTS
from ustun.http.backoff import (
    FULL_JITTER,
    IDEMPOTENT_METHODS,
    NO_JITTER,
    RETRY_STATUSES,
    TWENTY_PERCENT_JITTER,
    Backoff,
    Decision,
    Jitter,
    backoff,
    decide,
)

IN_PROGRESS = "https://api.example/problems/idempotency-in-progress"

seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False)
unit = st.floats(min_value=0, max_value=1, allow_nan=False)
backoffs = st.builds(
    Backoff,
    attempts=st.integers(1, 50),
    base=st.floats(0, 100, allow_nan=False),
    cap=st.floats(0, 1000, allow_nan=False),
    deadline=seconds,
    retry_after_cap=st.floats(0, 3600, allow_nan=False),
)


@given(backoffs, st.integers(1, 10_000), unit)
def test_a_delay_is_within_zero_and_the_capped_exponential(
    backoff: Backoff, retry: int, r: float
) -> None:
    delay = backoff.delay(retry, rand=lambda: r)
    assert 0 <= delay <= backoff.ceiling(retry) <= backoff.cap
    assert backoff.ceiling(retry) == min(backoff.cap, backoff.base * 2 ** min(retry - 1, 64))


@given(backoffs, st.integers(1, 10_000))
def test_full_jitter_spans_the_whole_range(backoff: Backoff, retry: int) -> None:
    assert backoff.delay(retry, rand=lambda: 0.0) == 0
    assert backoff.delay(retry, rand=lambda: 1.0) == backoff.ceiling(retry)


jitters = st.sampled_from([FULL_JITTER, TWENTY_PERCENT_JITTER, NO_JITTER])
bases = st.floats(0, 1e5, allow_nan=False)


@given(st.integers(1, 10_000), bases, st.floats(0, 1e6, allow_nan=False), jitters, unit)
def test_backoff_is_the_capped_exponential_times_a_factor_from_the_jitter(
    retry: int, base: float, cap: float, jitter: Jitter, r: float
) -> None:
    ceiling = min(cap, base * 2 ** min(retry - 1, 64))
    low, high = jitter
    wait = backoff(retry, base=base, cap=cap, jitter=jitter, rand=lambda: r)
    assert ceiling * low <= wait <= ceiling * high
    assert backoff(retry, base=base, cap=cap, jitter=jitter, rand=lambda: 0.0) == ceiling * low


@given(bases, jitters, unit)
def test_the_first_retry_waits_base_itself_jittered(base: float, jitter: Jitter, r: float) -> None:
    low, high = jitter
    assert backoff(base=base, jitter=jitter, rand=lambda: r) == base * (low + (high - low) * r)


@given(backoffs, st.integers(1, 10_000), unit)
def test_the_client_policy_waits_what_backoff_says(policy: Backoff, retry: int, r: float) -> None:
    expected = backoff(retry, base=policy.base, cap=policy.cap, rand=lambda: r)
    assert policy.delay(retry, rand=lambda: r) == expected


@given(st.integers(1, 60), bases)
def test_without_jitter_the_wait_doubles_from_base(retry: int, base: float) -> None:
    assert backoff(retry, base=base, jitter=NO_JITTER) == base * 2 ** (retry - 1)


def test_twenty_percent_jitter_draws_like_random_uniform() -> None:
    """Same seed, same waits as `base * rng.uniform(0.8, 1.2)` (the schedules' former draw)."""
    ours, theirs = random.Random(7), random.Random(7)
    for base in (5.0, 300.0, 86_400.0):
        wait = backoff(base=base, jitter=TWENTY_PERCENT_JITTER, rand=ours.random)
        assert wait == base * theirs.uniform(0.8, 1.2)


@given(backoffs, st.integers(1, 60))
def test_ceilings_grow_until_the_cap(backoff: Backoff, retry: int) -> None:
    assert backoff.ceiling(retry) <= backoff.ceiling(retry + 1)


@given(backoffs, st.integers(0, 100), seconds, st.none() | seconds, unit)
def test_next_wait_respects_attempts_and_deadline(
    backoff: Backoff, made: int, elapsed: float, retry_after: float | None, r: float
) -> None:
    wait = backoff.next_wait(
        attempts_made=made, elapsed=elapsed, retry_after=retry_after, rand=lambda: r
    )
    if made >= backoff.attempts:
        assert wait is None
    if wait is not None:
        assert elapsed + wait <= backoff.deadline
        if retry_after is None:
            assert wait <= backoff.cap
        else:
            assert wait == min(retry_after, backoff.retry_after_cap)


@given(seconds, st.floats(0, 3600, allow_nan=False))
def test_retry_after_overrides_the_backoff_up_to_its_cap(retry_after: float, cap: float) -> None:
    backoff = Backoff(retry_after_cap=cap, deadline=1e9)
    assert backoff.next_wait(attempts_made=1, elapsed=0, retry_after=retry_after) == min(
        retry_after, cap
    )


def test_the_defaults_are_safe() -> None:
    backoff = Backoff()
    assert backoff.attempts == DEFAULT_BACKOFF_ATTEMPTS
    waits = [backoff.ceiling(n) for n in range(1, DEFAULT_BACKOFF_ATTEMPTS)]
    assert waits == [0.5, 1.0, 2.0, 4.0]
    assert sum(waits) < backoff.deadline


@pytest.mark.parametrize("bad", [{"attempts": 0}, {"base": -1}, {"deadline": -0.1}])
def test_nonsense_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is for humans
        Backoff(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", sorted(IDEMPOTENT_METHODS))
@pytest.mark.parametrize("status", sorted(RETRY_STATUSES - {409}))
def test_idempotent_methods_retry_transient_statuses(method: str, status: int) -> None:
    decision = decide(method=method, has_key=False, replayable=True, status=status)
    assert decision.retry
    assert decision.reason == str(status)


@pytest.mark.parametrize("method", ["POST", "PATCH", "post"])
def test_a_keyless_post_or_patch_is_never_retried(method: str) -> None:
    for outcome in ({"status": 503}, {"error": "ReadTimeout"}):
        decision = decide(method=method, has_key=False, replayable=True, **outcome)  # type: ignore[arg-type]
        assert not decision.retry
        assert "without Idempotency-Key" in decision.reason
    assert decide(method=method, has_key=True, replayable=True, status=503).retry


def test_a_stream_body_is_never_retried() -> None:
    decision = decide(method="PUT", has_key=True, replayable=False, status=503)
    assert not decision.retry
    assert "cannot be replayed" in decision.reason


def test_409_only_when_the_key_is_in_progress() -> None:
    assert decide(
        method="POST", has_key=True, replayable=True, status=409, problem_type=IN_PROGRESS
    ).retry
    for kind in (None, "https://api.example/problems/state-conflict"):
        decision = decide(
            method="POST", has_key=True, replayable=True, status=409, problem_type=kind
        )
        assert not decision.retry


@pytest.mark.parametrize("status", [200, 201, 304, 400, 401, 404, 412, 422, 501])
def test_final_answers_are_not_retried(status: int) -> None:
    decision = decide(method="GET", has_key=False, replayable=True, status=status)
    assert decision == Decision(False, f"{status} is final")


def test_an_outcome_is_needed() -> None:
    with pytest.raises(ValueError, match="status or a network error"):
        decide(method="GET", has_key=False, replayable=True)


def test_network_errors_are_retried_and_say_so() -> None:
    decision = decide(method="GET", has_key=False, replayable=True, error="ConnectError: refused")
    assert decision.retry
    assert decision.reason == "network error: ConnectError: refused"
