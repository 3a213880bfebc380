import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.errors import InvalidIdempotencyKey
from ustun.http.idempotency_key import MAX_LENGTH, IdempotencyKey, parse_idempotency_key

UUID = "8e03978e-40d5-43e8-bc93-6894a57f9324"


@pytest.mark.parametrize(
    ("header", "key"),
    [
        (UUID, UUID),
        (f'"{UUID}"', UUID),
        ("a", "a"),
        ('"a"', "a"),
        (f"  {UUID}\t", UUID),  # RFC 9110 §5.5: surrounding whitespace is not part of the value
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        ('"a,b"', "a,b"),  # a comma is fine inside an sf-string
        ("k" * MAX_LENGTH, "k" * MAX_LENGTH),
        ('"' + "k" * MAX_LENGTH + '"', "k" * MAX_LENGTH),
        ("!#$%&'*+-.^_`|~:/()[]{}<>=?@;", "!#$%&'*+-.^_`|~:/()[]{}<>=?@;"),
    ],
)
def test_accepts_sf_strings_and_bare_keys(header: str, key: str) -> None:
    assert parse_idempotency_key([header]) == IdempotencyKey(key)


def test_absent_header_is_none() -> None:
    assert parse_idempotency_key([]) is None


@pytest.mark.parametrize(
    "header",
    [
        "",
        "   ",
        '""',  # empty sf-string
        '"',
        '"abc',  # unterminated
        'abc"',
        '"a"b"',
        '"a\\nb"',  # only \" and \\ are escapes in RFC 8941
        '"a\\"',  # escaped closing quote: unterminated
        '"abc";x=1',  # parameters are not part of a key
        '"a" "b"',
        "a b",
        "a,b",  # indistinguishable from two header lines joined by a proxy
        "a, b",
        "a\tb",
        "a\x00b",
        "a\x1fb",
        "a\x7fb",
        "\u00e9t\u00e9",  # not ASCII
        "k\u200b",
        '"caf\u00e9"',
        '" spaced "',  # space: not visible ASCII
        "k" * (MAX_LENGTH + 1),
        '"' + "k" * (MAX_LENGTH + 1) + '"',
        "k" * 100_000,  # huge values fail fast
    ],
)
def test_refuses_hostile_values(header: str) -> None:
    with pytest.raises(InvalidIdempotencyKey) as caught:
        parse_idempotency_key([header])
    assert caught.value.slug == "idempotency-key-invalid"
    assert caught.value.detail


def test_escapes_count_once_towards_the_length() -> None:
    header = '"' + "\\\\" * MAX_LENGTH + '"'
    assert parse_idempotency_key([header]) == IdempotencyKey("\\" * MAX_LENGTH)
    with pytest.raises(InvalidIdempotencyKey):
        parse_idempotency_key(['"' + "\\\\" * (MAX_LENGTH + 1) + '"'])


@pytest.mark.parametrize("values", [["a", "a"], ["a", "b"], ['"a"', "b"], ["", "a"]])
def test_several_header_instances_are_invalid(values: list[str]) -> None:
    with pytest.raises(InvalidIdempotencyKey, match="once"):
        parse_idempotency_key(values)


@pytest.mark.parametrize("value", ["", "a b", "\u00e9", "k" * 256, "\x00"])
def test_key_value_type_validates_itself(value: str) -> None:
    with pytest.raises(ValueError, match="visible ASCII"):
        IdempotencyKey(value)


VISIBLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=255)


@given(VISIBLE)
def test_any_visible_key_round_trips_as_an_sf_string(key: str) -> None:
    quoted = '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    assert parse_idempotency_key([quoted]) == IdempotencyKey(key)


@given(st.text(max_size=600))
def test_never_raises_anything_but_invalid_key(header: str) -> None:
    try:
        key = parse_idempotency_key([header])
    except InvalidIdempotencyKey:
        return
    assert key is not None
    assert 1 <= len(key.value) <= MAX_LENGTH
