"""A `webhook-timestamp` that is no time is refused as out of range, whatever its length or the
tolerance, before any arithmetic on it (issue 26, item 12)."""

from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.errors import SignatureError, TimestampOutOfRange
from ustun.http.signature import MAX_TIMESTAMP, Secret, headers, verify

BODY = b'{"id":"evt_1","type":"payment.created","data":{}}'
SECRET = Secret.generate()


@pytest.mark.parametrize(
    "timestamp",
    ["9" * 309, "9" * 400, "9" * 5000, str(MAX_TIMESTAMP + 1), "1" + "0" * 12],
)
@pytest.mark.parametrize("tolerance", [300, math.inf])
def test_a_timestamp_after_the_year_9999_is_out_of_range(timestamp: str, tolerance: float) -> None:
    """Even with no tolerance to check (a broker consumer's default): from 309 digits on, the
    skew overflowed a float (5,000 digits: past `int()`'s limit, a ValueError)."""
    sent = headers([SECRET], "msg_1", BODY) | {"webhook-timestamp": timestamp}
    with pytest.raises(TimestampOutOfRange, match="after the year 9999"):
        verify(SECRET, sent, BODY, tolerance=tolerance)


def test_the_last_second_of_9999_is_still_a_time() -> None:
    sent = headers([SECRET], "msg_1", BODY, timestamp=MAX_TIMESTAMP)
    assert verify(SECRET, sent, BODY, tolerance=math.inf).timestamp == MAX_TIMESTAMP
    padded = sent | {"webhook-timestamp": "0" * 5000 + str(MAX_TIMESTAMP)}
    assert verify(SECRET, padded, BODY, tolerance=math.inf).timestamp == MAX_TIMESTAMP


@given(
    st.one_of(
        st.text(),
        st.from_regex(r"\A\s*[0-9]{1,20}\s*\Z"),
        st.builds(str.__mul__, st.sampled_from("0159"), st.integers(1, 6000)),
    ),
    st.sampled_from([0.0, 300.0, math.inf]),
)
def test_any_timestamp_is_verified_or_a_signature_error(raw: str, tolerance: float) -> None:
    sent = headers([SECRET], "msg_1", BODY) | {"webhook-timestamp": raw}
    with contextlib.suppress(SignatureError):
        verify(SECRET, sent, BODY, tolerance=tolerance)
