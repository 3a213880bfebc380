"""`/openapi.json`: valid OpenAPI 3.1, problem responses, headers, security, webhooks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Header
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from ustun.service import create_app
from ustun.service.event_types import EventType
from ustun.service.openapi import Notes, complete, problem_responses
from ustun.settings import Settings

PROBLEM = {"$ref": "#/components/schemas/Problem"}


@pytest.fixture
async def document(settings: Settings, event_types: tuple[EventType, ...]) -> dict[str, Any]:
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        response = await http.get("/openapi.json")
        assert (await http.get("/docs")).status_code == 200
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def test_the_served_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_the_validator_is_really_checking(document: dict[str, Any]) -> None:
    document["paths"]["/v1/payments"]["get"]["responses"]["200"] = {"content": 5}
    with pytest.raises(OpenAPIValidationError):
        validate(document)


def test_put_documents_both_its_successes(document: dict[str, Any]) -> None:
    """200 replaces under If-Match; 201 creates under If-None-Match: * (schemathesis found the
    201 undocumented)."""
    responses = document["paths"]["/v1/documents/{document_id}"]["put"]["responses"]
    assert {"200", "201"} <= responses.keys()


def test_every_operation_lists_its_problems_with_one_shared_schema(
    document: dict[str, Any],
) -> None:
    assert document["components"]["schemas"]["Problem"]["required"] == ["type", "title", "status"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response["content"] == {
                        "application/problem+json": {"schema": PROBLEM}
                    }, (method, path, status)
            if path.startswith("/v1/"):
                assert operation["security"] == [{"bearerAuth": []}]
                assert "401" in operation["responses"]
    listing = document["paths"]["/v1/payments"]["get"]["responses"]
    assert "validation-error" in listing["422"]["description"]
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_webhooks_section_has_one_entry_per_event_type(
    document: dict[str, Any], event_types: tuple[EventType, ...]
) -> None:
    assert set(document["webhooks"]) == {t.name for t in event_types}
    post = document["webhooks"]["payment.succeeded"]["post"]
    assert {p["name"] for p in post["parameters"]} == {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert schema["properties"]["type"]["const"] == "payment.succeeded"


def _sample_app_document(settings: Settings) -> dict[str, Any]:
    app = create_app(settings)
    router = APIRouter()

    @router.post("/v1/things", responses=problem_responses("state-conflict", "insufficient-funds"))
    async def create_thing(idempotency_key: str = Header(alias="Idempotency-Key")) -> None:
        """A route that declares its key itself."""

    @router.get("/v1/things/{thing_id}")
    async def get_thing(thing_id: str) -> None:
        """A route whose middleware honours If-None-Match."""

    @router.patch("/v1/things/{thing_id}")
    async def patch_thing(thing_id: str) -> None:
        """A route whose middleware requires If-Match and takes an optional key."""

    app.include_router(router)
    headers = {
        ("GET", "/v1/things/{thing_id}"): Notes(if_none_match=True),
        ("PATCH", "/v1/things/{thing_id}"): Notes(idempotency="optional", if_match="required"),
    }
    return complete(app.openapi(), [], headers)


def test_headers_and_their_problems_where_routes_honour_them(settings: Settings) -> None:
    document = _sample_app_document(settings)
    validate(document)
    things = document["paths"]["/v1/things"]["post"]
    assert {p["name"] for p in things["parameters"]} == {"Idempotency-Key"}
    assert {"400", "409", "422"} <= set(things["responses"])
    assert "idempotency-key-missing" in things["responses"]["400"]["description"]
    assert "state-conflict" in things["responses"]["409"]["description"]
    assert "insufficient-funds" in things["responses"]["409"]["description"]
    assert "idempotency-in-progress" in things["responses"]["409"]["description"]

    read = document["paths"]["/v1/things/{thing_id}"]["get"]
    assert any(p["name"] == "If-None-Match" for p in read["parameters"])
    assert "304" in read["responses"]
    assert "404" in read["responses"]

    patch = document["paths"]["/v1/things/{thing_id}"]["patch"]
    names = {p["name"]: p["required"] for p in patch["parameters"] if p["in"] == "header"}
    assert names == {"Idempotency-Key": False, "If-Match": True}
    assert {"412", "428"} <= set(patch["responses"])
    assert "idempotency-key-missing" not in patch["responses"]["400"]["description"]


def test_every_body_lists_its_400_413_and_415(document: dict[str, Any]) -> None:
    with_body = [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "requestBody" in operation
    ]
    assert len(with_body) >= 10
    for path, method, operation in with_body:
        for status, slug in (
            ("400", "bad-request"),
            ("413", "payload-too-large"),
            ("415", "unsupported-media-type"),
        ):
            assert slug in operation["responses"][status]["x-problems"], (method, path)
    transfers = document["paths"]["/v1/transfers"]["post"]["responses"]["409"]["x-problems"]
    assert "balance-limit-exceeded" in transfers
