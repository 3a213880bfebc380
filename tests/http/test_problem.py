import json

import pytest

from ustun.http.problem import CATALOGUE, MEDIA_TYPE, encode, problem, problem_type_uri

DESIGN_SLUGS = {
    "idempotency-key-missing": 400,
    "idempotency-key-invalid": 400,
    "idempotency-in-progress": 409,
    "idempotency-key-reused": 422,
    "precondition-required": 428,
    "precondition-failed": 412,
    "state-conflict": 409,
    "insufficient-funds": 409,
    "validation-error": 422,
    "not-found": 404,
    "unauthorized": 401,
}


@pytest.mark.parametrize(("slug", "status"), DESIGN_SLUGS.items())
def test_catalogue_has_every_design_slug_with_its_status(slug: str, status: int) -> None:
    assert CATALOGUE[slug].status == status
    assert CATALOGUE[slug].title
    assert CATALOGUE[slug].description


def test_problem_uses_catalogue_defaults() -> None:
    body = problem("not-found", "No payment pay_1.", base="https://api.example/", instance="urn:x")
    assert body == {
        "type": "https://api.example/problems/not-found",
        "title": "Not found",
        "status": 404,
        "detail": "No payment pay_1.",
        "instance": "urn:x",
    }


def test_problem_extensions_and_overrides() -> None:
    body = problem("validation-error", "bad", errors=[{"field": "amount"}], status=400)
    assert body["status"] == 400
    assert body["errors"] == [{"field": "amount"}]
    assert body["type"] == "/problems/validation-error"
    assert "instance" not in body


def test_unknown_slug_needs_status_and_title() -> None:
    with pytest.raises(ValueError, match="unknown problem slug"):
        problem("teapot", "short and stout")
    body = problem("teapot", "short and stout", status=418, title="I'm a teapot")
    assert body["status"] == 418


def test_type_uri_joins_base_without_double_slash() -> None:
    assert problem_type_uri("x", "http://h/") == "http://h/problems/x"
    assert problem_type_uri("x") == "/problems/x"


def test_encode_is_compact_utf8_json() -> None:
    raw = encode({"detail": "ünïcode"})
    assert raw == '{"detail":"ünïcode"}'.encode()
    assert json.loads(raw) == {"detail": "ünïcode"}
    assert MEDIA_TYPE == "application/problem+json"
