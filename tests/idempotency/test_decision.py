"""The decision core, without I/O: every answer to a keyed request, from the key and the record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ustun.http.fingerprint import fingerprint
from ustun.idempotency.decision import (
    BUSY,
    FULL,
    IN_PROGRESS_RETRY_AFTER,
    LEASE_LOST,
    RUN,
    UNSTORED_STATUSES,
    Keep,
    Refuse,
    Replay,
    Request,
    found,
    keep_plain,
    keep_transactional,
    key_of,
    not_claimed,
    on_lookup,
    over_quota,
    storable,
    unavailable,
)
from ustun.idempotency.records import Found, Lookup, OverQuota, Record, State, StoredResponse

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
KEY = b"k" * 32
OLD_KEY = b"o" * 32
ANSWER = StoredResponse(201, (("content-type", "application/json"),), b'{"id": 1}')


def request(body: bytes = b'{"amount": 1}', *, keys: tuple[bytes, ...] = ()) -> Request:
    made = fingerprint("POST", "/v1/payments", b"", body, key=keys[0] if keys else None)
    return Request("acct", "k1", "POST", "/v1/payments", b"", body, made, keys)


def record(
    fingerprint: str,
    state: State = State.COMPLETED,
    *,
    response: StoredResponse | None = ANSWER,
    locked_until: datetime = NOW,
) -> Record:
    return Record(fingerprint, state, locked_until, response)


def headers(refusal: Refuse) -> dict[str, str]:
    return dict(refusal.headers)


def test_a_key_is_read_from_its_header() -> None:
    assert key_of(['"abc"'], required=True, method="POST", path="/p") == "abc"
    assert key_of(["abc"], required=False, method="POST", path="/p") == "abc"


def test_no_key_passes_where_optional_and_is_refused_where_required() -> None:
    assert key_of([], required=False, method="POST", path="/p") is None
    missing = key_of([], required=True, method="POST", path="/p")
    assert missing == Refuse(
        "idempotency-key-missing", "POST /p requires an Idempotency-Key header."
    )


@pytest.mark.parametrize("values", [[""], ["a", "b"], ["x" * 256], ['"unterminated']])
def test_a_malformed_key_is_refused(values: list[str]) -> None:
    refusal = key_of(values, required=False, method="POST", path="/p")
    assert isinstance(refusal, Refuse)
    assert refusal.slug == "idempotency-key-invalid"
    assert refusal.outcome is None


def test_the_same_request_replays_its_completed_answer() -> None:
    req = request()
    assert found(record(req.fingerprint), req, NOW) == Replay(ANSWER)


def test_another_request_under_the_key_is_refused_as_reused() -> None:
    req = request()
    other = request(b'{"amount": 2}')
    refusal = found(record(other.fingerprint), req, NOW)
    assert isinstance(refusal, Refuse)
    assert (refusal.slug, refusal.outcome) == ("idempotency-key-reused", "reused")


def test_a_fingerprint_made_under_the_previous_key_still_matches() -> None:
    before = request(keys=(OLD_KEY,))
    after = request(keys=(KEY, OLD_KEY))
    assert found(record(before.fingerprint), after, NOW) == Replay(ANSWER)
    changed = request(b'{"amount": 2}', keys=(OLD_KEY,))
    assert isinstance(found(record(changed.fingerprint), after, NOW), Refuse)


def test_a_fingerprint_made_under_a_key_no_longer_known_is_taken_to_match() -> None:
    """It cannot be told from another request; a replay applies nothing twice."""
    gone = request(b'{"amount": 2}', keys=(OLD_KEY,))
    assert found(record(gone.fingerprint), request(keys=(KEY,)), NOW) == Replay(ANSWER)


@pytest.mark.parametrize(
    ("left", "retry_after"), [(timedelta(seconds=0.4), "1"), (timedelta(seconds=30), "1")]
)
def test_a_key_in_progress_answers_409_with_retry_after(left: timedelta, retry_after: str) -> None:
    req = request()
    held = record(req.fingerprint, State.IN_PROGRESS, response=None, locked_until=NOW + left)
    refusal = found(held, req, NOW)
    assert isinstance(refusal, Refuse)
    assert (refusal.slug, refusal.outcome) == ("idempotency-in-progress", "in-progress")
    assert headers(refusal) == {"retry-after": retry_after}


def test_a_lease_already_run_out_asks_for_no_wait() -> None:
    req = request()
    late = record(req.fingerprint, State.IN_PROGRESS, response=None, locked_until=NOW)
    refusal = found(late, req, NOW + timedelta(seconds=5))
    assert isinstance(refusal, Refuse)
    assert headers(refusal) == {"retry-after": "0"}


def test_a_completed_record_whose_answer_was_not_kept_is_still_in_progress() -> None:
    req = request()
    refusal = found(record(req.fingerprint, response=None), req, NOW)
    assert isinstance(refusal, Refuse)
    assert refusal.slug == "idempotency-in-progress"


def test_busy_and_a_lost_lease_wait_the_whole_second() -> None:
    for refusal in (BUSY, LEASE_LOST):
        assert refusal.slug == "idempotency-in-progress"
        assert headers(refusal) == {"retry-after": "1"}
    assert IN_PROGRESS_RETRY_AFTER == 1.0
    assert "took this Idempotency-Key over" in LEASE_LOST.detail


def test_a_claim_not_won_answers_the_record_or_the_quota() -> None:
    req = request()
    assert not_claimed(Found(record(req.fingerprint)), req, NOW) == Replay(ANSWER)
    refusal = not_claimed(OverQuota(limit=1000, retry_after=61.2), req, NOW)
    assert refusal == over_quota(OverQuota(limit=1000, retry_after=61.2))


def test_over_quota_answers_429_with_retry_after_and_the_limit() -> None:
    refusal = over_quota(OverQuota(limit=1000, retry_after=61.2))
    assert (refusal.slug, refusal.outcome) == ("quota-exceeded", "over-quota")
    assert headers(refusal) == {"retry-after": "62"}
    assert dict(refusal.extensions) == {"limit": 1000}
    assert "1000 bytes" in refusal.detail


def test_a_free_key_runs() -> None:
    assert on_lookup(Lookup(None, full=False), request(), NOW) is RUN


def test_a_key_another_transaction_holds_is_busy() -> None:
    req = request()
    assert on_lookup(Lookup(record(req.fingerprint), full=True, held=False), req, NOW) is BUSY


def test_a_record_that_answers_is_answered_before_the_quota() -> None:
    req = request()
    assert on_lookup(Lookup(record(req.fingerprint), full=True), req, NOW) == Replay(ANSWER)
    running = record(req.fingerprint, State.IN_PROGRESS, response=None, locked_until=NOW)
    refusal = on_lookup(Lookup(running, full=True), req, NOW - timedelta(seconds=0.5))
    assert isinstance(refusal, Refuse)
    assert refusal.slug == "idempotency-in-progress"


def test_a_dead_holders_claim_is_taken_over() -> None:
    """A claim whose lease ran out answers nothing: the request runs (or meets the quota)."""
    req = request()
    dead = record("theirs", State.IN_PROGRESS, response=None, locked_until=NOW)
    assert on_lookup(Lookup(dead, full=False), req, NOW) is RUN
    assert on_lookup(Lookup(dead, full=True), req, NOW) is FULL


def test_a_new_key_of_a_full_scope_asks_the_store_when_to_come_back() -> None:
    assert on_lookup(Lookup(None, full=True), request(), NOW) is FULL


def test_an_answer_over_the_size_limit_is_unavailable() -> None:
    kept = StoredResponse(201, (("location", "/v1/payments/1"), ("etag", '"1"')), None)
    refusal = unavailable(kept, sealer=False, max_body=4096)
    assert (refusal.slug, refusal.outcome) == ("idempotency-response-unavailable", "replayed")
    assert "exceeded the 4096-byte replay limit" in refusal.detail
    assert headers(refusal) == {"location": "/v1/payments/1"}
    assert dict(refusal.extensions) == {"original_status": 201}


def test_a_no_store_answer_without_a_sealer_is_unavailable_for_that_reason() -> None:
    secret = StoredResponse(201, (("cache-control", "no-store"),), None)
    assert "no key to keep it sealed" in unavailable(secret, sealer=False, max_body=1).detail
    assert "replay limit" in unavailable(secret, sealer=True, max_body=1).detail


@pytest.mark.parametrize("status", [200, 201, 202, 204, 303, 304])
def test_a_success_commits_with_its_answer(status: int) -> None:
    assert keep_transactional(status) is Keep.COMMIT
    assert keep_plain(status, store_server_errors=False) is Keep.STORE


@pytest.mark.parametrize("status", [401, 403, 404, 409, 410])
def test_a_storable_refusal_is_kept_alone(status: int) -> None:
    assert keep_transactional(status) is Keep.STORE
    assert keep_plain(status, store_server_errors=False) is Keep.STORE


@pytest.mark.parametrize("status", sorted(UNSTORED_STATUSES))
def test_a_request_refused_before_it_did_anything_frees_its_key(status: int) -> None:
    assert not storable(status)
    assert keep_transactional(status) is Keep.RELEASE
    assert keep_plain(status, store_server_errors=True) is Keep.RELEASE


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_frees_the_key_unless_plain_mode_keeps_them(status: int) -> None:
    assert keep_transactional(status) is Keep.RELEASE
    assert keep_plain(status, store_server_errors=False) is Keep.RELEASE
    assert keep_plain(status, store_server_errors=True) is Keep.STORE
