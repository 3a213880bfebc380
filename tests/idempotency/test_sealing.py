"""What is kept of an answer and what a replay gets back: a `no-store` body only sealed."""

from __future__ import annotations

import pytest

from ustun.errors import SecretKeyError
from ustun.idempotency.records import StoredResponse
from ustun.idempotency.sealing import kept, opened
from ustun.webhooks.secretbox import SecretBox

BOX = SecretBox("a test master key of at least 32 characters")
SECRET = StoredResponse(201, (("cache-control", "private, no-store"),), b'{"secret": "whsec_1"}')
PLAIN = StoredResponse(201, (("content-type", "application/json"),), b'{"id": "pay_1"}')


@pytest.mark.parametrize("sealer", [None, BOX])
def test_a_cacheable_answer_is_kept_and_replayed_as_it_is(sealer: SecretBox | None) -> None:
    stored = kept(PLAIN, sealer, scope="acct", key="k")
    assert stored == PLAIN
    assert opened(stored, sealer, scope="acct", key="k") == PLAIN.body


def test_a_no_store_body_rests_sealed_and_opens_for_its_own_key_only() -> None:
    stored = kept(SECRET, BOX, scope="acct", key="k")
    assert stored.body is not None
    assert b"whsec_1" not in stored.body
    assert stored.headers == SECRET.headers
    assert opened(stored, BOX, scope="acct", key="k") == SECRET.body
    with pytest.raises(SecretKeyError):  # bound to its record: no other key opens it
        opened(stored, BOX, scope="acct", key="other")


def test_without_a_sealer_a_no_store_body_is_not_kept() -> None:
    stored = kept(SECRET, None, scope="acct", key="k")
    assert stored.body is None
    assert opened(stored, None, scope="acct", key="k") is None
    assert opened(kept(SECRET, BOX, scope="acct", key="k"), None, scope="acct", key="k") is None
