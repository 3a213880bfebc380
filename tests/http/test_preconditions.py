"""RFC 9110 §13.1 and §13.2.2: every rule of every precondition, in the standard's order."""

from datetime import UTC, datetime

import pytest

from ustun.errors import InvalidPrecondition
from ustun.http.dates import format_http_date
from ustun.http.etag import MAX_LIST_TAGS, EntityTag, EntityTagMatch
from ustun.http.preconditions import (
    NotModified,
    Outcome,
    PreconditionFailed,
    Preconditions,
    Proceed,
    Validators,
    evaluate,
)

MODIFIED = datetime(2026, 6, 1, 12, 0, 0, 400_000, tzinfo=UTC)  # sub-second on purpose
AT = format_http_date(MODIFIED)  # "… 12:00:00 GMT": equal once whole seconds are compared
BEFORE = "Mon, 01 Jun 2026 11:59:59 GMT"
AFTER = "Mon, 01 Jun 2026 12:00:01 GMT"
EXISTS = Validators(EntityTag("1"), MODIFIED)
NO_DATE = Validators(EntityTag("1"))
MISSING = None

GO = Proceed()
NOT_MODIFIED_INM = NotModified("if-none-match")
NOT_MODIFIED_IMS = NotModified("if-modified-since")
FAIL_IM = PreconditionFailed("if-match")
FAIL_IUS = PreconditionFailed("if-unmodified-since")
FAIL_INM = PreconditionFailed("if-none-match")

ROWS: list[tuple[str, str, dict[str, str], Validators | None, Outcome]] = [
    # --- §13.1.1 If-Match: "*" true iff a representation exists; else strong comparison.
    ("if-match * exists", "PUT", {"if-match": "*"}, EXISTS, GO),
    ("if-match * missing", "PUT", {"if-match": "*"}, MISSING, FAIL_IM),
    ("if-match same tag", "PUT", {"if-match": '"1"'}, EXISTS, GO),
    ("if-match other tag", "PUT", {"if-match": '"2"'}, EXISTS, FAIL_IM),
    ("if-match weak tag never matches", "PUT", {"if-match": 'W/"1"'}, EXISTS, FAIL_IM),
    ("if-match list with the tag", "PATCH", {"if-match": '"0", "1", "2"'}, EXISTS, GO),
    ("if-match list without it", "DELETE", {"if-match": '"0", "2"'}, EXISTS, FAIL_IM),
    ("if-match tag on missing", "PUT", {"if-match": '"1"'}, MISSING, FAIL_IM),
    ("if-match empty list", "PUT", {"if-match": ""}, EXISTS, FAIL_IM),
    ("if-match false on GET is 412", "GET", {"if-match": '"2"'}, EXISTS, FAIL_IM),
    ("if-match true on GET", "GET", {"if-match": '"1"'}, EXISTS, GO),
    # --- §13.1.4 If-Unmodified-Since: only without If-Match; needs a valid date and a date.
    ("ius equal", "PUT", {"if-unmodified-since": AT}, EXISTS, GO),
    ("ius later", "PUT", {"if-unmodified-since": AFTER}, EXISTS, GO),
    ("ius earlier", "PUT", {"if-unmodified-since": BEFORE}, EXISTS, FAIL_IUS),
    ("ius earlier on GET", "GET", {"if-unmodified-since": BEFORE}, EXISTS, FAIL_IUS),
    ("ius invalid date ignored", "PUT", {"if-unmodified-since": "yesterday"}, EXISTS, GO),
    ("ius without a date ignored", "PUT", {"if-unmodified-since": BEFORE}, NO_DATE, GO),
    ("ius on missing ignored", "PUT", {"if-unmodified-since": BEFORE}, MISSING, GO),
    (
        "ius ignored when if-match present",
        "PUT",
        {"if-match": '"1"', "if-unmodified-since": BEFORE},
        EXISTS,
        GO,
    ),
    # --- §13.1.2 If-None-Match: "*" false iff it exists; else weak comparison. False → 304 on
    # GET/HEAD, 412 otherwise.
    ("inm * exists GET", "GET", {"if-none-match": "*"}, EXISTS, NOT_MODIFIED_INM),
    ("inm * exists HEAD", "HEAD", {"if-none-match": "*"}, EXISTS, NOT_MODIFIED_INM),
    ("inm * exists PUT", "PUT", {"if-none-match": "*"}, EXISTS, FAIL_INM),
    ("inm * missing PUT creates", "PUT", {"if-none-match": "*"}, MISSING, GO),
    ("inm same tag GET", "GET", {"if-none-match": '"1"'}, EXISTS, NOT_MODIFIED_INM),
    ("inm weak tag GET", "GET", {"if-none-match": 'W/"1"'}, EXISTS, NOT_MODIFIED_INM),
    ("inm weak tag HEAD", "HEAD", {"if-none-match": 'W/"1"'}, EXISTS, NOT_MODIFIED_INM),
    ("inm list with tag", "GET", {"if-none-match": '"9", W/"1"'}, EXISTS, NOT_MODIFIED_INM),
    ("inm other tag GET", "GET", {"if-none-match": '"2"'}, EXISTS, GO),
    ("inm same tag PUT", "PUT", {"if-none-match": '"1"'}, EXISTS, FAIL_INM),
    ("inm weak tag DELETE", "DELETE", {"if-none-match": 'W/"1"'}, EXISTS, FAIL_INM),
    ("inm other tag PUT", "PUT", {"if-none-match": '"2"'}, EXISTS, GO),
    ("inm tag on missing", "GET", {"if-none-match": '"1"'}, MISSING, GO),
    ("inm malformed", "GET", {"if-none-match": "1"}, EXISTS, GO),
    ("lowercase method", "get", {"if-none-match": '"1"'}, EXISTS, NOT_MODIFIED_INM),
    # --- §13.1.3 If-Modified-Since: GET/HEAD only, only without If-None-Match.
    ("ims equal", "GET", {"if-modified-since": AT}, EXISTS, NOT_MODIFIED_IMS),
    ("ims later", "HEAD", {"if-modified-since": AFTER}, EXISTS, NOT_MODIFIED_IMS),
    ("ims earlier", "GET", {"if-modified-since": BEFORE}, EXISTS, GO),
    ("ims ignored on PUT", "PUT", {"if-modified-since": AFTER}, EXISTS, GO),
    ("ims invalid date ignored", "GET", {"if-modified-since": "soon"}, EXISTS, GO),
    ("ims without a date ignored", "GET", {"if-modified-since": AFTER}, NO_DATE, GO),
    ("ims on missing ignored", "GET", {"if-modified-since": AFTER}, MISSING, GO),
    (
        "ims ignored when inm present",
        "GET",
        {"if-none-match": '"2"', "if-modified-since": AFTER},
        EXISTS,
        GO,
    ),
    # --- §13.2.2: the order of evaluation.
    (
        "if-match false wins over inm",
        "GET",
        {"if-match": '"2"', "if-none-match": '"1"'},
        EXISTS,
        FAIL_IM,
    ),
    (
        "if-match true then inm false on GET",
        "GET",
        {"if-match": '"1"', "if-none-match": '"1"'},
        EXISTS,
        NOT_MODIFIED_INM,
    ),
    (
        "if-match true then inm * on PUT",
        "PUT",
        {"if-match": '"1"', "if-none-match": "*"},
        EXISTS,
        FAIL_INM,
    ),
    (
        "ius false wins over ims",
        "GET",
        {"if-unmodified-since": BEFORE, "if-modified-since": AFTER},
        EXISTS,
        FAIL_IUS,
    ),
    ("no preconditions", "DELETE", {}, EXISTS, GO),
    ("no preconditions, missing", "PUT", {}, MISSING, GO),
]


@pytest.mark.parametrize(
    ("method", "headers", "current", "expected"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_evaluation(
    method: str, headers: dict[str, str], current: Validators | None, expected: Outcome
) -> None:
    pre = Preconditions.from_headers(headers.items())
    assert evaluate(method, pre, current) == expected


def test_outcomes_carry_their_status() -> None:
    assert GO.status is None
    assert NOT_MODIFIED_INM.status == 304
    assert FAIL_IM.status == 412


def test_repeated_field_lines_are_one_list_and_names_are_case_insensitive() -> None:
    pre = Preconditions.from_headers(
        [("If-Match", '"a"'), ("content-type", "x"), ("IF-MATCH", '"b"')]
    )
    assert pre.if_match == EntityTagMatch(tags=(EntityTag("a"), EntityTag("b")))
    assert pre.if_none_match is None


def test_a_date_field_with_two_members_or_a_bad_date_is_dropped() -> None:
    pre = Preconditions.from_headers(
        [("if-modified-since", AT), ("if-modified-since", AT), ("if-unmodified-since", "nope")]
    )
    assert pre == Preconditions()
    assert Preconditions.from_headers([("if-modified-since", AT)]).if_modified_since == (
        MODIFIED.replace(microsecond=0)
    )


@pytest.mark.parametrize(
    "value",
    ["1", "3, 4", '"1" "2"', 'W/ "1"', "**", '"1", *', ", ".join(['"1"'] * (MAX_LIST_TAGS + 1))],
)
def test_an_if_match_that_is_no_list_of_tags_is_a_bad_request(value: str) -> None:
    """§13.1.1: If-Match = "*" / #entity-tag. Nothing can match a value outside that grammar,
    so it is 400 `precondition-invalid`, not a precondition that evaluated false (412)."""
    with pytest.raises(InvalidPrecondition) as refused:
        Preconditions.from_headers([("If-Match", value)])
    assert refused.value.slug == "precondition-invalid"
    assert refused.value.extensions == {"header": "If-Match"}
    assert '`"3"`' in refused.value.detail
    with pytest.raises(InvalidPrecondition):
        Preconditions(if_match=EntityTagMatch.parse(value))
