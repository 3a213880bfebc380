import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.http.fingerprint import KEYED_PREFIX, canonical_json, fingerprint, key_id, matches


def fp(body: bytes, method: str = "POST", path: str = "/v1/payments", query: bytes = b"") -> str:
    return fingerprint(method, path, query, body)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (b'{"amount":100,"currency":"EUR"}', b'{"currency": "EUR", "amount": 100}'),
        (b'{"a":{"y":1,"x":2}}', b'{ "a" : { "x" : 2 , "y" : 1 } }\n'),
        (b'{"d":"caf\\u00e9"}', '{"d":"café"}'.encode()),  # escapes vs UTF-8: same string
        (b"[1, 2, 3]", b"[1,2,3]"),
    ],
)
def test_semantically_identical_json_matches(a: bytes, b: bytes) -> None:
    assert fp(a) == fp(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (b'{"amount":100}', b'{"amount":101}'),
        (b'{"amount":100}', b'{"amount":"100"}'),
        (b'{"amount":1}', b'{"amount":1.0}'),  # a different JSON number, kept apart on purpose
        (b"[1,2]", b"[2,1]"),  # arrays are ordered
        (b"", b"{}"),
        (b"not json", b"not  json"),  # raw bytes: every byte counts
    ],
)
def test_different_bodies_differ(a: bytes, b: bytes) -> None:
    assert fp(a) != fp(b)


def test_method_path_and_query_are_part_of_it() -> None:
    base = fp(b"{}")
    assert fp(b"{}", method="PATCH") != base
    assert fp(b"{}", method="post") == base
    assert fp(b"{}", path="/v1/transfers") != base
    assert fp(b"{}", query=b"a=1") != base
    assert fp(b"{}", query=b"a=1&b=2") != fp(b"{}", query=b"b=2&a=1")
    assert fingerprint("POST", "/v1/payments", "a=1", b"{}") == fp(b"{}", query=b"a=1")


def test_fields_cannot_bleed_into_each_other() -> None:
    assert fingerprint("POST", "/a", b"b", b"") != fingerprint("POST", "/ab", b"", b"")
    assert fingerprint("POST", "/a", b"", b"x") != fingerprint("POST", "/a", b"x", b"")


def test_json_and_raw_bodies_never_collide() -> None:
    # The canonical form of `{ }` is `{}`; sent raw it would be a different kind of body.
    assert fp(b"{ }") == fp(b"{}")
    assert fp(b"\xff{}") != fp(b"{}")


def test_is_hex_sha256() -> None:
    value = fp(b"{}")
    assert len(value) == 64
    int(value, 16)


@pytest.mark.parametrize("body", [b"\xff\xfe", b"{", b"[" * 100_000, b"NaN1"])
def test_non_json_falls_back_to_raw_bytes(body: bytes) -> None:
    assert canonical_json(body) is None
    assert fp(body) == fp(body)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON, st.booleans())
def test_any_document_matches_its_reserialisation(document: object, pretty: bool) -> None:
    compact = json.dumps(document, separators=(",", ":")).encode()
    other = json.dumps(document, indent=2 if pretty else None, ensure_ascii=not pretty).encode()
    assert fp(compact) == fp(other)


@given(st.binary(max_size=200))
def test_any_bytes_have_a_fingerprint(body: bytes) -> None:
    assert fp(body) == fp(body)


UNICODE_AND_SURROGATES = st.text(st.characters(exclude_categories=()), max_size=8)


@given(st.dictionaries(UNICODE_AND_SURROGATES, UNICODE_AND_SURROGATES, max_size=4))
def test_json_with_lone_surrogates_is_still_canonical(document: dict[str, str]) -> None:
    """`"\\ud800"` is valid JSON though not valid Unicode: it once made `fingerprint` raise."""
    escaped = json.dumps(document).encode()
    assert canonical_json(escaped) is not None
    assert fp(escaped) == fp(json.dumps(document, indent=1).encode())


def test_a_lone_surrogate_escaped_or_in_raw_bytes_is_the_same_document() -> None:
    # json.loads reads the bytes ED A0 80 (UTF-8 for U+D800, which UTF-8 forbids) as "\ud800".
    assert fp(b'{"a":"\\ud800"}') == fp(b'{"a": "\xed\xa0\x80"}')
    assert fp(b'{"a":"\\ud800"}') != fp(b'{"a":"\\ud801"}')


KEY = b"a key of thirty-two bytes, exact"


def test_a_keyed_fingerprint_is_an_hmac_marked_with_its_key() -> None:
    keyed = fingerprint("POST", "/v1/payments", b"", b"{}", key=KEY)
    assert keyed.startswith(f"{KEYED_PREFIX}{key_id(KEY)}.")
    assert len(keyed) == 55  # fits the 64 characters a stored fingerprint may have
    assert keyed == fingerprint("POST", "/v1/payments", b"", b"{ }", key=KEY)
    assert keyed != fingerprint("POST", "/v1/payments", b"", b"{}", key=b"another key")
    assert keyed != fingerprint("POST", "/v1/payments", b"", b"[]", key=KEY)
    assert key_id(KEY) != key_id(b"another key")
    assert key_id(KEY) not in KEY.decode()


def test_matches_checks_each_fingerprint_under_the_key_that_made_it() -> None:
    def request_matches(stored: str, *keys: bytes) -> bool | None:
        return matches(stored, "POST", "/v1/payments", b"", b'{"a": 1}', keys=keys)

    plain = fp(b'{"a":1}')
    keyed = fingerprint("POST", "/v1/payments", b"", b'{"a":1}', key=KEY)
    other = fingerprint("POST", "/v1/payments", b"", b'{"a":2}', key=KEY)
    assert request_matches(plain) is True
    assert request_matches(plain, KEY) is True
    assert request_matches(fp(b'{"a":2}'), KEY) is False
    assert request_matches(keyed, b"newer key", KEY) is True
    assert request_matches(other, b"newer key", KEY) is False
    # Made under a key it is not given: it cannot tell.
    assert request_matches(keyed, b"newer key") is None
    assert request_matches(keyed) is None
