"""Handler helpers: 428 names the header to send, 412 says what to do, reads answer 304."""

from __future__ import annotations

import pytest

from ustun.concurrency import Preconditions, Version, conditional_read, failed, require_if_match
from ustun.errors import PreconditionFailedError, PreconditionRequiredError
from ustun.http.preconditions import Validators

CURRENT = Validators(Version(3, "0123456789abcdef").etag)


def _pre(**headers: str) -> Preconditions:
    return Preconditions.from_headers((k.replace("_", "-"), v) for k, v in headers.items())


def test_require_if_match() -> None:
    require_if_match(_pre(if_match='"3"'))
    require_if_match(_pre(if_match="*"))
    require_if_match(_pre(if_none_match="*"), allow_create=True)
    for pre, create in [
        (_pre(), False),
        (_pre(if_none_match="*"), False),
        (_pre(if_none_match='"3"'), True),
        (_pre(if_unmodified_since="Sun, 06 Nov 1994 08:49:37 GMT"), False),
    ]:
        with pytest.raises(PreconditionRequiredError) as refused:
            require_if_match(pre, allow_create=create)
        assert refused.value.slug == "precondition-required"
        assert refused.value.extensions == {"header": "If-Match"}
        assert "If-Match" in refused.value.detail
        assert ("If-None-Match: *" in refused.value.detail) is create


def test_conditional_read() -> None:
    tag = str(CURRENT.etag)
    assert conditional_read("GET", _pre(if_none_match=f"W/{tag}"), CURRENT)
    assert conditional_read("HEAD", _pre(if_none_match=tag), CURRENT)
    assert not conditional_read("GET", _pre(if_none_match='"3"'), CURRENT)
    assert not conditional_read("GET", _pre(), CURRENT)
    with pytest.raises(PreconditionFailedError):
        conditional_read("GET", _pre(if_match=f"W/{tag}"), CURRENT)


@pytest.mark.parametrize(
    ("pre", "field", "header", "says"),
    [
        (_pre(if_match='"2"'), "if-match", "If-Match", "re-apply"),
        (_pre(if_none_match="*"), "if-none-match", "If-None-Match", "does not exist"),
        (_pre(if_none_match='"3"'), "if-none-match", "If-None-Match", "re-apply"),
        (_pre(), "if-unmodified-since", "If-Unmodified-Since", "modified"),
    ],
)
def test_412_says_which_header_and_what_to_do(
    pre: Preconditions, field: str, header: str, says: str
) -> None:
    problem = failed(pre, field)
    assert problem.slug == "precondition-failed"
    assert problem.extensions == {"header": header}
    assert says in problem.detail
