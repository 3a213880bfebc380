"""`ustun.webhooks.filters`: the payload filter language, its checks at the door, and
properties that hold of every filter and every event."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ustun.webhooks.filters import (
    MAX_CONDITIONS,
    MAX_DEPTH,
    MAX_IN,
    MAX_SIZE,
    FilterError,
    cached,
    parse,
)

PAYMENT = {
    "id": "pay_1",
    "amount": 1500,
    "currency": "EUR",
    "status": "succeeded",
    "order_id": None,
    "paid": True,
    "customer": {"country": "DE", "tags": ["vip", "b2b"]},
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
    "ratio": 0.5,
}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, True),
        ({"currency": "EUR"}, True),
        ({"currency": "USD"}, False),
        ({"amount": 1500.0}, True),
        ({"paid": True}, True),
        ({"paid": 1}, False),
        ({"amount": True}, False),
        ({"order_id": None}, True),
        ({"missing": None}, False),
        ({"customer.country": "DE"}, True),
        ({"customer": {"country": "DE", "tags": ["vip", "b2b"]}}, True),
        ({"customer": {"country": "DE"}}, False),
        ({"customer.tags": ["vip", "b2b"]}, True),
        ({"customer.tags": ["b2b", "vip"]}, False),
        ({"customer.tags": "vip"}, False),
        ({"customer.tags.0": "vip"}, True),
        ({"items.1.sku": "B-2"}, True),
        ({"items.2.sku": {"$exists": False}}, True),
        ({"items.x": {"$exists": False}}, True),
        ({"amount.value": {"$exists": False}}, True),
        ({"currency": "EUR", "status": "succeeded"}, True),
        ({"currency": "EUR", "status": "failed"}, False),
        ({"amount": {"$eq": 1500}}, True),
        ({"amount": {"$ne": 1500}}, False),
        ({"missing": {"$ne": 1}}, True),
        ({"missing": {"$eq": None}}, False),
        ({"amount": {"$gt": 1000}}, True),
        ({"amount": {"$gt": 1500}}, False),
        ({"amount": {"$gte": 1500}}, True),
        ({"amount": {"$lt": 1500.5}}, True),
        ({"amount": {"$lte": 1499}}, False),
        ({"amount": {"$gt": 1000, "$lt": 2000}}, True),
        ({"amount": {"$gt": 1000, "$lt": 1200}}, False),
        ({"amount": {"$gt": "1000"}}, False),
        ({"currency": {"$gt": "DKK"}}, True),
        ({"currency": {"$lt": 5}}, False),
        ({"paid": {"$gt": 0}}, False),
        ({"missing": {"$lt": 10}}, False),
        ({"ratio": {"$lt": 1}}, True),
        ({"currency": {"$in": ["EUR", "USD"]}}, True),
        ({"currency": {"$in": ["GBP"]}}, False),
        ({"currency": {"$in": []}}, False),
        ({"amount": {"$in": [True, "1500", 1500]}}, True),
        ({"paid": {"$in": [1]}}, False),
        ({"customer.tags": {"$in": [["vip", "b2b"]]}}, True),
        ({"currency": {"$nin": ["GBP"]}}, True),
        ({"currency": {"$nin": ["EUR"]}}, False),
        ({"missing": {"$nin": ["EUR"]}}, True),
        ({"missing": {"$in": [None]}}, False),
        ({"order_id": {"$exists": True}}, True),
        ({"missing": {"$exists": True}}, False),
        ({"$and": [{"currency": "EUR"}, {"amount": {"$gt": 1000}}]}, True),
        ({"$and": [{"currency": "EUR"}, {"amount": {"$gt": 2000}}]}, False),
        ({"$or": [{"currency": "USD"}, {"amount": {"$gt": 1000}}]}, True),
        ({"$or": [{"currency": "USD"}, {"amount": {"$gt": 2000}}]}, False),
        ({"$not": {"currency": "USD"}}, True),
        ({"$not": {"currency": "EUR"}}, False),
        ({"$not": {}}, False),
        ({"status": "succeeded", "$or": [{"customer.country": "FR"}, {"paid": True}]}, True),
        ({"$or": [{"$and": [{"a": 1}]}, {"$not": {"items.0.qty": {"$lt": 2}}}]}, True),
    ],
)
def test_a_filter_matches_what_its_conditions_say(spec: dict[str, Any], expected: bool) -> None:
    assert parse(spec).matches(PAYMENT) is expected


def test_paths_walk_only_objects_and_arrays() -> None:
    wanted = parse({"a.b": 1})
    assert wanted.matches({"a": {"b": 1}})
    assert not wanted.matches({"a": [1]})
    assert not wanted.matches({"a": "b"})
    assert not wanted.matches({"a.b": 1})  # a dot always separates
    assert not wanted.matches(None)  # an expunged event's data
    assert parse({"a.01": "x"}).matches({"a": {"01": "x"}})
    assert parse({"a.1": "x"}).matches({"a": ["w", "x"]})
    assert not parse({"a.-1": "x"}).matches({"a": ["w", "x"]})
    assert not parse({"a.\u0661": "x"}).matches({"a": ["w", "x"]})  # ASCII digits only


def _refusal(spec: Any) -> FilterError:
    with pytest.raises(FilterError) as raised:
        parse(spec)
    return raised.value


@pytest.mark.parametrize(
    ("spec", "position", "words"),
    [
        ([], "filter", "an object"),
        ("amount", "filter", "an object"),
        ({"amount": {"$gtx": 1}}, "filter.amount.$gtx", "unknown operator `$gtx`"),
        ({"$and": [{}, {"amount": {"$gt": []}}]}, "filter.$and[1].amount.$gt", "number or"),
        ({"$and": [{"a": 1}, {"b": {"$regex": "x"}}]}, "filter.$and[1].b.$regex", "unknown"),
        ({"$nor": []}, "filter.$nor", "unknown operator `$nor`"),
        ({"$gt": 1}, "filter.$gt", "applies to a path"),
        ({"a": {"$not": {"$gt": 1}}}, "filter.a.$not", "goes at a filter's top"),
        ({"a": {"$gt": 1, "b": 2}}, "filter.a.b", "mixes operators and fields"),
        ({"$and": []}, "filter.$and", "non-empty list"),
        ({"$or": {"a": 1}}, "filter.$or", "non-empty list"),
        ({"$or": [1]}, "filter.$or[0]", "must be a filter"),
        ({"$not": [{"a": 1}]}, "filter.$not", "must be a filter"),
        ({"a..b": 1}, "filter.a..b", "none of them empty"),
        ({"": 1}, "filter.", "none of them empty"),
        ({"a.": 1}, "filter.a.", "none of them empty"),
        ({"a": {"$gt": True}}, "filter.a.$gt", "number or a string"),
        ({"a": {"$lte": None}}, "filter.a.$lte", "number or a string"),
        ({"a": {"$in": "EUR"}}, "filter.a.$in", "a list"),
        ({"a": {"$nin": list(range(MAX_IN + 1))}}, "filter.a.$nin", f"at most {MAX_IN}"),
        ({"a": {"$exists": 1}}, "filter.a.$exists", "true or false"),
        ({"a": float("nan")}, "filter.a", "finite"),
        ({"a": {"$in": [1, float("inf")]}}, "filter.a.$in[1]", "finite"),
        ({"a": {1, 2}}, "filter.a", "JSON value"),
        ({1: "a"}, "filter", "not a string"),
        ({"a": {1: "b"}}, "filter.a", "not a string"),
        ({"a": {"$gt": 1, 2: 3}}, "filter.a", "not a string"),
        ({"a": [[[[[[[[["deep"]]]]]]]]]}, "filter.a[0][0][0][0][0][0][0][0]", "nest"),
    ],
)
def test_a_refused_filter_names_the_position(spec: Any, position: str, words: str) -> None:
    refused = _refusal(spec)
    assert refused.position == position
    assert words in refused.reason
    assert str(refused) == f"{position}: {refused.reason}"


def _nested(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        spec = {"$not": spec}
    return spec


def test_filters_nest_at_most_max_depth() -> None:
    assert parse(_nested(MAX_DEPTH)).matches({"a": 1}) is (MAX_DEPTH % 2 == 1)
    refused = _refusal(_nested(MAX_DEPTH + 1))
    assert refused.position == "filter" + ".$not" * MAX_DEPTH
    assert "nest at most" in refused.reason
    inside = _refusal({"$and": [{"$or": [_nested(MAX_DEPTH - 1)]}]})
    assert inside.position.startswith("filter.$and[0].$or[0].$not")


def test_a_filter_holds_at_most_max_conditions() -> None:
    fits = {f"f{i}": i for i in range(MAX_CONDITIONS)}
    parse(fits)
    refused = _refusal({**fits, "x": {"$gt": 1}})
    assert refused.position == "filter.x.$gt"
    assert f"at most {MAX_CONDITIONS} conditions" in refused.reason
    spread = {"$or": [{"a": {"$gt": 1, "$lt": 9}}] * (MAX_CONDITIONS // 2 + 1)}
    assert _refusal(spread).position == f"filter.$or[{MAX_CONDITIONS // 2}].a.$gt"


def test_a_filter_is_at_most_max_size_as_stored() -> None:
    refused = _refusal({"a": "x" * MAX_SIZE})
    assert refused.position == "filter"
    assert f"at most {MAX_SIZE}" in refused.reason
    # Stored with non-ASCII escaped: six bytes a character here.
    assert _refusal({"a": "é" * (MAX_SIZE // 6)}).position == "filter"


def test_the_stored_text_parses_back_to_the_same_filter() -> None:
    spec = {"customer.country": "DÉ", "$or": [{"amount": {"$gte": 10}}]}
    kept = parse(spec)
    assert kept.text.isascii()
    assert json.loads(kept.text) == spec
    again = cached(kept.text)
    assert again is cached(kept.text)
    assert again.text == kept.text


# Properties. JSON values as events carry them, and paths into them.
NAMES = st.sampled_from(["a", "b", "c", "0", "1"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(-3, 3, allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "a", "b", "é"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
    max_leaves=10,
)
data_objects = st.dictionaries(NAMES, json_values, max_size=4)
paths = st.lists(NAMES, min_size=1, max_size=3).map(".".join)
bounds = st.integers(-3, 3) | st.sampled_from(["", "a", "b"])
conditions = (
    json_values.filter(lambda v: not isinstance(v, dict))
    | st.builds(lambda op, v: {op: v}, st.sampled_from(["$eq", "$ne"]), json_values)
    | st.builds(lambda op, v: {op: v}, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), bounds)
    | st.builds(
        lambda op, v: {op: v}, st.sampled_from(["$in", "$nin"]), st.lists(json_values, max_size=3)
    )
    | st.builds(lambda v: {"$exists": v}, st.booleans())
)
leaves = st.dictionaries(paths, conditions, min_size=1, max_size=2)
filters = st.recursive(
    leaves,
    lambda inner: (
        st.builds(lambda fs: {"$and": fs}, st.lists(inner, min_size=1, max_size=3))
        | st.builds(lambda fs: {"$or": fs}, st.lists(inner, min_size=1, max_size=3))
        | st.builds(lambda f: {"$not": f}, inner)
    ),
    max_leaves=6,
)


@given(filters, json_values)
def test_matches_never_raises_on_any_json(spec: dict[str, Any], data: Any) -> None:
    assert parse(spec).matches(data) in (True, False)


@given(filters, data_objects)
def test_not_negates(spec: dict[str, Any], data: dict[str, Any]) -> None:
    assert parse({"$not": spec}).matches(data) is not parse(spec).matches(data)


@given(filters, data_objects)
def test_and_of_one_is_itself(spec: dict[str, Any], data: dict[str, Any]) -> None:
    alone = parse(spec).matches(data)
    assert parse({"$and": [spec]}).matches(data) is alone
    assert parse({"$or": [spec]}).matches(data) is alone


@given(filters, filters, data_objects)
def test_or_commutes_and_is_and_of_nots_negated(
    one: dict[str, Any], other: dict[str, Any], data: dict[str, Any]
) -> None:
    either = parse({"$or": [one, other]}).matches(data)
    assert parse({"$or": [other, one]}).matches(data) is either
    assert parse({"$and": [one, other]}).matches(data) is (
        parse(one).matches(data) and parse(other).matches(data)
    )
    de_morgan = parse({"$not": {"$and": [{"$not": one}, {"$not": other}]}})
    assert de_morgan.matches(data) is either


@given(paths, json_values, data_objects)
def test_in_of_one_value_is_equality(path: str, value: Any, data: dict[str, Any]) -> None:
    equal = parse({path: {"$eq": value}}).matches(data)
    assert parse({path: {"$in": [value]}}).matches(data) is equal
    assert parse({path: {"$nin": [value]}}).matches(data) is not equal
    assert parse({path: {"$ne": value}}).matches(data) is not equal
    if not isinstance(value, dict):
        assert parse({path: value}).matches(data) is equal


@given(paths, data_objects)
def test_exists_true_and_false_partition(path: str, data: dict[str, Any]) -> None:
    there = parse({path: {"$exists": True}}).matches(data)
    assert parse({path: {"$exists": False}}).matches(data) is not there
    if not there:
        assert not parse({path: {"$eq": None}}).matches(data)


@given(paths, bounds, data_objects)
def test_ordering_splits_values_of_the_same_kind(
    path: str, bound: Any, data: dict[str, Any]
) -> None:
    lt, eq, gt = (parse({path: {op: bound}}).matches(data) for op in ("$lt", "$eq", "$gt"))
    assert lt + eq + gt <= 1
    assert parse({path: {"$lte": bound}}).matches(data) is (lt or eq)
    assert parse({path: {"$gte": bound}}).matches(data) is (gt or eq)


@given(data_objects)
def test_a_value_equals_itself_at_its_path(data: dict[str, Any]) -> None:
    for key, value in data.items():
        assert parse({key: {"$eq": value}}).matches(data)


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=3))
def test_parse_refuses_only_with_a_filter_error(spec: dict[str, Any]) -> None:
    refused = None
    try:
        parse(spec)
    except FilterError as exc:
        refused = exc
    assert refused is None or refused.position.startswith("filter")


def _canonical(value: Any) -> Any:
    """JSON equality as plain Python equality: booleans apart from numbers, objects and arrays
    compared whole (an oracle written apart from `filters`)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("scalar", value)


@given(json_values, json_values)
def test_equality_is_json_equality(wanted: Any, value: Any) -> None:
    equal = _canonical(wanted) == _canonical(value)
    assert parse({"k": {"$eq": wanted}}).matches({"k": value}) is equal
    assert parse({"k": {"$in": [[], wanted, "x"]}}).matches({"k": value}) is (
        equal or _canonical(value) in (_canonical([]), _canonical("x"))
    )
