import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.errors import InvalidLastEventId
from ustun.http.last_event_id import LIMIT, parse_last_event_id


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0),
        ("", 0),
        (" \t", 0),
        ("0", 0),
        ("7", 7),
        (" 12\t", 12),
        ("0042", 42),
        (str(LIMIT - 1), LIMIT - 1),
        ("0" * 40 + "9", 9),
    ],
)
def test_valid_ids(value: str | None, expected: int) -> None:
    assert parse_last_event_id(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        str(LIMIT),  # 9223372036854775808: the driver's OverflowError of issue 15
        str(LIMIT * 10),
        "9" * 5000,  # beyond Python's int() digit limit: still a clean refusal
        "-1",
        "+1",
        "1_000",
        "1.0",
        "1e3",
        "٣",  # a non-ASCII digit int() would accept
        "abc",
        "1 2",
        "0x10",
    ],
)
def test_refused_ids_are_bad_request(value: str) -> None:
    with pytest.raises(InvalidLastEventId) as refused:
        parse_last_event_id(value)
    assert refused.value.slug == "bad-request"
    assert refused.value.extensions == {"header": "Last-Event-ID"}


@given(st.integers(min_value=0, max_value=LIMIT - 1))
def test_every_id_round_trips(n: int) -> None:
    assert parse_last_event_id(str(n)) == n
