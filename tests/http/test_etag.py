"""RFC 9110 §8.8.3 entity-tags: grammar, comparison, and If-Match / If-None-Match lists."""

import pytest

from ustun.http.etag import MAX_LIST_TAGS, EntityTag, EntityTagMatch, version_etag


def test_version_etag_is_a_quoted_strong_tag() -> None:
    assert version_etag(1) == '"1"'
    assert version_etag(42) != version_etag(43)


@pytest.mark.parametrize(
    ("text", "opaque", "weak"),
    [
        ('"xyzzy"', "xyzzy", False),  # §8.8.3 examples
        ('W/"xyzzy"', "xyzzy", True),
        ('""', "", False),
        ('W/""', "", True),
        ('"a,b"', "a,b", False),  # a comma is an etagc
        ('"!#~"', "!#~", False),  # %x21, %x23, %x7E: the edges of etagc
        ('"caf\xe9"', "caf\xe9", False),  # obs-text
        ('  "x"\t', "x", False),  # surrounding OWS
    ],
)
def test_parses_entity_tags(text: str, opaque: str, weak: bool) -> None:
    tag = EntityTag.parse(text)
    assert (tag.opaque, tag.weak) == (opaque, weak)
    assert str(tag) == text.strip(" \t")


@pytest.mark.parametrize(
    "text",
    [
        "xyzzy",  # not quoted
        '"xyzzy',  # unterminated
        'xyzzy"',
        'w/"x"',  # %s"W/": case-sensitive
        'W/ "x"',  # no space inside
        "W/x",
        '"a"b"',  # DQUOTE is not an etagc
        '"a b"',  # SP is not an etagc
        '"tab\there"',
        '"\x7f"',  # DEL
        "",
        "*",
        '"a", "b"',
    ],
)
def test_rejects_what_is_not_one_entity_tag(text: str) -> None:
    with pytest.raises(ValueError, match="entity-tag"):
        EntityTag.parse(text)


def test_the_value_type_validates_its_opaque_part() -> None:
    with pytest.raises(ValueError, match="opaque-tag"):
        EntityTag('has"quote')


# RFC 9110 §8.8.3.2, the table of examples, row by row.
@pytest.mark.parametrize(
    ("one", "two", "strong", "weak"),
    [
        ('W/"1"', 'W/"1"', False, True),
        ('W/"1"', 'W/"2"', False, False),
        ('W/"1"', '"1"', False, True),
        ('"1"', '"1"', True, True),
    ],
)
def test_comparison_table(one: str, two: str, strong: bool, weak: bool) -> None:
    a, b = EntityTag.parse(one), EntityTag.parse(two)
    assert a.strong_match(b) is strong
    assert b.strong_match(a) is strong
    assert a.weak_match(b) is weak
    assert b.weak_match(a) is weak


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("*", EntityTagMatch(any=True)),
        (" * ", EntityTagMatch(any=True)),
        ('"a"', EntityTagMatch(tags=(EntityTag("a"),))),
        (
            '"xyzzy", "r2d2xxxx", "c3piozzzz"',  # §13.1.1 example
            EntityTagMatch(
                tags=(EntityTag("xyzzy"), EntityTag("r2d2xxxx"), EntityTag("c3piozzzz"))
            ),
        ),
        (
            'W/"xyzzy", W/"r2d2xxxx"',  # §13.1.2 example
            EntityTagMatch(tags=(EntityTag("xyzzy", weak=True), EntityTag("r2d2xxxx", weak=True))),
        ),
        ('"a,b" ,"c"', EntityTagMatch(tags=(EntityTag("a,b"), EntityTag("c")))),
        (', "a",, "b" ,', EntityTagMatch(tags=(EntityTag("a"), EntityTag("b")))),  # §5.6.1.2
        ('"a","b"', EntityTagMatch(tags=(EntityTag("a"), EntityTag("b")))),
        ("", EntityTagMatch()),
        (" , ", EntityTagMatch()),
    ],
)
def test_parses_lists_and_star(value: str, expected: EntityTagMatch) -> None:
    assert EntityTagMatch.parse(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "**",
        '*, "a"',  # "*" is alone or not at all
        '"a" "b"',  # a list needs commas
        "a, b",
        '"a", b',
        '"unterminated',
        '"a"junk',
    ],
)
def test_a_malformed_list_matches_nothing(value: str) -> None:
    parsed = EntityTagMatch.parse(value)
    assert parsed.malformed
    assert not parsed.strong_match(EntityTag("a"))
    assert not parsed.weak_match(EntityTag("a"))


def test_list_matching_strong_and_weak() -> None:
    listed = EntityTagMatch.parse('W/"1", "2"')
    assert listed.weak_match(EntityTag("1"))
    assert not listed.strong_match(EntityTag("1"))
    assert listed.strong_match(EntityTag("2"))
    assert not listed.weak_match(EntityTag("3"))
    star = EntityTagMatch.parse("*")
    assert star.strong_match(EntityTag("anything", weak=True))
    assert not EntityTagMatch().weak_match(EntityTag(""))


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "hostile", ["  ," * 5000 + "x", '"a" ,' * 5000 + ' "', " " * 20000 + "x", '"' + "a" * 50000]
)
def test_hostile_lists_are_rejected_in_linear_time(hostile: str) -> None:
    # Adjacent optional whitespace rules once made these backtrack for minutes.
    assert EntityTagMatch.parse(hostile).malformed


def test_a_list_longer_than_the_limit_matches_nothing() -> None:
    at_limit = ", ".join(f'"{n}"' for n in range(MAX_LIST_TAGS))
    assert EntityTagMatch.parse(at_limit).strong_match(EntityTag("0"))
    over = f'{at_limit}, "{MAX_LIST_TAGS}"'
    assert EntityTagMatch.parse(over) == EntityTagMatch(malformed=True)
