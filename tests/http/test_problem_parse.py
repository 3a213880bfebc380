"""Reading problem details as a client: `parse_problem` and the `Problem` value."""

from __future__ import annotations

from ustun.http.problem import Problem, encode, parse_problem, problem


def test_parse_problem_reads_what_problem_writes() -> None:
    body = problem("precondition-failed", "changed", base="https://api.example", retry=3)
    parsed = parse_problem("application/problem+json; charset=utf-8", encode(body))
    assert parsed == Problem(
        type="https://api.example/problems/precondition-failed",
        title="Precondition failed",
        status=412,
        detail="changed",
        extensions={"retry": 3},
    )
    assert parsed.slug == "precondition-failed"


def test_parse_problem_ignores_what_is_not_a_problem() -> None:
    assert parse_problem("application/json", b'{"type": "x"}') is None
    assert parse_problem(None, b"") is None
    assert parse_problem("application/problem+json", b"[1]") is None
    assert parse_problem("application/problem+json", b"{not json") is None
    odd = parse_problem("application/problem+json", b'{"status": "500", "title": 7}')
    assert odd == Problem()  # RFC 9457 §3.1: members of the wrong type are ignored
