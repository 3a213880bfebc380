"""`merge_diff` against the RFC 7396 §2 MergePatch algorithm, written out here independently."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ustun.http.merge_diff import merge_diff

# JSON without nulls: a merge patch cannot set a member to null (RFC 7396 §1).
scalars = st.booleans() | st.integers() | st.text(max_size=5)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.text(max_size=3), json_values, max_size=5)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 §2, line by line."""
    if isinstance(patch, dict):
        if not isinstance(target, dict):
            target = {}
        target = dict(target)
        for name, value in patch.items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = merge_patch(target.get(name), value)
        return target
    return patch


@given(documents, documents)
def test_applying_the_diff_gives_the_new_document(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert merge_patch(old, merge_diff(old, new)) == new


def test_the_diff_is_minimal() -> None:
    old = {"title": "a", "body": "b", "meta": {"x": 1, "y": 2}, "gone": True}
    new = {"title": "a", "body": "c", "meta": {"x": 1, "y": 3}}
    assert merge_diff(old, new) == {"gone": None, "body": "c", "meta": {"y": 3}}
    assert merge_diff(old, old) == {}
