"""Token buckets and the RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.http.ratelimit import MAX_SF_INTEGER, Decision, RatePolicy, TokenBucket
from ustun.http.retry_after import format_retry_after

POLICY = RatePolicy(rate=100, burst=200)
# RFC 9651 List of one Item: an sf-string with integer parameters.
ITEM = re.compile(r'"(?:[ !#-\[\]-~]|\\["\\])*"(?:;[a-z*][a-z0-9_.*-]*=\d{1,15})+')


def test_a_full_bucket_lets_the_burst_through_then_refuses() -> None:
    bucket = TokenBucket(POLICY, now=0.0)
    decisions = [bucket.take(POLICY, now=0.0) for _ in range(201)]
    assert all(d.allowed for d in decisions[:200])
    assert [d.remaining for d in decisions[:3]] == [199, 198, 197]
    assert decisions[199] == Decision(True, 0, 0.01)
    assert decisions[200] == Decision(False, 0, 0.01)


def test_tokens_come_back_at_the_rate_and_never_past_the_burst() -> None:
    policy = RatePolicy(rate=2, burst=3)
    bucket = TokenBucket(policy, now=10.0)
    for _ in range(3):
        assert bucket.take(policy, now=10.0).allowed
    refused = bucket.take(policy, now=10.0)
    assert refused == Decision(False, 0, 0.5)
    assert bucket.take(policy, now=10.5) == Decision(True, 0, 0.5)  # one token back, taken
    assert bucket.level(policy, now=1_000.0) == 3.0
    assert bucket.take(policy, now=1_000.0).remaining == 2


def test_a_refusal_takes_nothing_and_says_how_long_to_wait() -> None:
    policy = RatePolicy(rate=4, burst=1)
    bucket = TokenBucket(policy, now=0.0)
    assert bucket.take(policy, now=0.0).allowed
    refused = bucket.take(policy, now=0.1)  # 0.4 of a token
    assert not refused.allowed
    assert refused.wait == pytest.approx(0.15)
    assert bucket.take(policy, now=0.25).allowed


def test_a_client_back_exactly_at_retry_after_passes_despite_float_rounding() -> None:
    policy = RatePolicy(rate=1, burst=1)
    bucket = TokenBucket(policy, now=0.7)
    assert bucket.take(policy, now=0.7).allowed
    refused = bucket.take(policy, now=0.7)
    assert format_retry_after(refused.wait) == "1"
    assert bucket.take(policy, now=0.7 + 1).allowed  # 1.7 - 0.7 == 0.9999999999999999


def test_time_that_goes_back_counts_as_none() -> None:
    policy = RatePolicy(rate=1, burst=1)
    bucket = TokenBucket(policy, now=5.0)
    assert bucket.take(policy, now=5.0).allowed
    assert not bucket.take(policy, now=4.0).allowed
    assert bucket.take(policy, now=6.0).allowed


def test_the_policy_field_is_the_burst_per_the_time_an_empty_bucket_takes_to_fill() -> None:
    assert POLICY.policy_field() == '"default";q=200;w=2'
    assert RatePolicy(rate=100, burst=10).policy_field() == '"default";q=10;w=1'
    assert RatePolicy(rate=0.5, burst=3).policy_field() == '"default";q=3;w=6'
    assert RatePolicy(rate=3, burst=10).window == 4


def test_the_limit_field_rounds_the_wait_up_like_retry_after() -> None:
    assert POLICY.limit_field(Decision(True, 150, 0.004)) == '"default";r=150;t=1'
    assert POLICY.limit_field(Decision(False, 0, 2.0)) == '"default";r=0;t=2'
    assert POLICY.limit_field(Decision(True, 3, 0.0)) == '"default";r=3;t=0'
    assert POLICY.limit_field(Decision(False, 0, 1e300)) == f'"default";r=0;t={MAX_SF_INTEGER}'


def test_policy_names_are_sf_strings() -> None:
    named = RatePolicy(rate=1, burst=1, name='per "key" \\ 1')
    assert named.policy_field() == '"per \\"key\\" \\\\ 1";q=1;w=1'
    assert ITEM.fullmatch(named.policy_field())
    with pytest.raises(ValueError, match="printable ASCII"):
        RatePolicy(rate=1, burst=1, name="caf\u00e9")


@pytest.mark.parametrize(
    ("rate", "burst"),
    [(0, 1), (-1, 1), (math.inf, 1), (math.nan, 1), (1, 0), (1, MAX_SF_INTEGER + 1)],
)
def test_a_policy_needs_a_positive_finite_rate_and_a_burst_of_at_least_one(
    rate: float, burst: int
) -> None:
    with pytest.raises(ValueError, match="must be"):
        RatePolicy(rate=rate, burst=burst)


policies = st.builds(
    RatePolicy,
    rate=st.floats(min_value=1e-6, max_value=1e6),
    burst=st.integers(min_value=1, max_value=300),
)
steps = st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=60)


@given(policies, steps)
def test_no_window_lets_more_through_than_the_burst_plus_what_the_rate_refills(
    policy: RatePolicy, gaps: list[float]
) -> None:
    bucket = TokenBucket(policy, now=0.0)
    now, passed = 0.0, 0
    for gap in gaps:
        now += gap
        decision = bucket.take(policy, now)
        passed += decision.allowed
        assert 0 <= decision.remaining <= policy.burst
        assert decision.wait > 0
        assert passed <= policy.burst + policy.rate * now + 1e-6
        assert ITEM.fullmatch(policy.limit_field(decision))


@given(policies, steps)
def test_after_a_refusal_the_request_passes_once_retry_after_has_gone_by(
    policy: RatePolicy, gaps: list[float]
) -> None:
    bucket = TokenBucket(policy, now=0.0)
    now = 0.0
    for gap in gaps:
        now += gap
        decision = bucket.take(policy, now)
        if not decision.allowed:
            assert bucket.take(policy, now + float(format_retry_after(decision.wait))).allowed
            return


@given(policies)
def test_a_client_that_keeps_to_the_advertised_policy_is_never_refused(
    policy: RatePolicy,
) -> None:
    """`q` requests at once, then `w` seconds of rest, again and again."""
    bucket = TokenBucket(policy, now=0.0)
    for round_ in range(3):
        now = round_ * policy.window
        assert all(bucket.take(policy, now).allowed for _ in range(policy.burst))
    assert ITEM.fullmatch(policy.policy_field())
