"""`/openapi.json`: valid OpenAPI 3.1 that says enough for a typed generated client: named
resource schemas, headers, media types, the key grammar, problems, links, webhooks."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Header
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from referencing.jsonschema import DRAFT202012

from support import schema_validators
from ustun.errors import InvalidIdempotencyKey
from ustun.http.idempotency_key import parse_idempotency_key
from ustun.http.problem import CATALOGUE
from ustun.service import create_app
from ustun.service.plumbing.problems import problem_responses
from ustun.service.specs.event_types import EventType
from ustun.service.specs.openapi import IDEMPOTENCY_KEY_PATTERN, Notes, complete
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


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def test_every_json_answer_is_a_named_resource_schema(document: dict[str, Any]) -> None:
    """Generated clients get typed models only from named schemas (issue 15: `Any` before)."""
    schemas = document["components"]["schemas"]
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            if not status.startswith("2") or path == "/metrics":
                continue
            content = response.get("content", {})
            if method == "head" or status == "204":
                assert content == {}, (method, path, status)
                continue
            if "application/json" in content and "/result" not in path:
                ref = content["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[1] in schemas, (method, path, status)
            else:
                assert content, (method, path, status)


@pytest.mark.parametrize(
    ("method", "path", "status", "schema"),
    [
        ("post", "/v1/payments", "201", "Payment"),
        ("get", "/v1/payments", "200", "PaymentList"),
        ("patch", "/v1/payments/{payment_id}", "200", "Payment"),
        ("post", "/v1/ledger-accounts", "201", "LedgerAccount"),
        ("post", "/v1/transfers", "201", "Transfer"),
        ("put", "/v1/documents/{document_id}", "200", "Document"),
        ("put", "/v1/documents/{document_id}", "201", "Document"),
        ("post", "/v1/reports", "202", "Job"),
        ("get", "/v1/jobs", "200", "JobList"),
        ("post", "/v1/webhook-endpoints", "201", "WebhookEndpointWithSecret"),
        ("get", "/v1/webhook-endpoints/{endpoint_id}", "200", "WebhookEndpoint"),
        (
            "post",
            "/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
            "200",
            "WebhookEndpointWithSecret",
        ),
        ("get", "/v1/events/{event_id}", "200", "Event"),
        ("get", "/v1/event-types", "200", "EventTypeList"),
        ("get", "/v1/deliveries", "200", "DeliveryList"),
        ("get", "/v1/deliveries/{delivery_id}", "200", "DeliveryWithAttempts"),
    ],
)
def test_each_answer_names_its_resource(
    document: dict[str, Any], method: str, path: str, status: str, schema: str
) -> None:
    response = document["paths"][path][method]["responses"][status]
    assert response["content"]["application/json"]["schema"] == _ref(schema)


def test_resource_schemas_say_what_is_always_there(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    payment = schemas["Payment"]
    assert set(payment["required"]) >= {"id", "amount", "currency", "status", "created_at"}
    assert payment["properties"]["created_at"]["format"] == "date-time"
    assert schemas["Transfer"]["required"][2:4] == ["from", "to"]
    assert "secret" in schemas["WebhookEndpointWithSecret"]["required"]
    assert "secret" not in schemas["WebhookEndpoint"]["properties"]
    attempts = schemas["DeliveryWithAttempts"]["properties"]["attempts"]
    assert attempts["items"] == _ref("DeliveryAttempt")
    page = schemas["PaymentList"]
    assert page["properties"]["data"]["items"] == _ref("Payment")
    assert {"type": "null"} in page["properties"]["next_cursor"]["anyOf"]
    assert {"$ref": "#/components/schemas/Problem"} in schemas["Job"]["properties"]["error"][
        "anyOf"
    ]


def test_answers_document_the_headers_they_carry(document: dict[str, Any]) -> None:
    paths = document["paths"]
    created = paths["/v1/payments"]["post"]["responses"]["201"]["headers"]
    assert created["ETag"]["required"]
    assert created["Location"]["required"]
    assert {"Last-Modified", "Cache-Control", "Idempotent-Replayed"} <= created.keys()
    job = paths["/v1/jobs/{job_id}"]["get"]["responses"]
    assert {"ETag", "Last-Modified", "Retry-After", "Cache-Control"} <= job["200"]["headers"].keys()
    # RFC 9110 §15.4.5: a 304 carries what the 200 would.
    assert job["304"]["headers"] == job["200"]["headers"]
    accepted = paths["/v1/reports"]["post"]["responses"]["202"]
    assert {"Location", "Retry-After", "Idempotent-Replayed"} <= accepted["headers"].keys()
    in_progress = paths["/v1/reports"]["post"]["responses"]["409"]
    assert "Retry-After" in in_progress["headers"]
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            if path.startswith("/v1/") and status[0] in "23":
                assert "Cache-Control" in response["headers"], (method, path, status)


def test_every_post_and_patch_takes_an_idempotency_key_with_its_grammar(
    document: dict[str, Any],
) -> None:
    required = set()
    for method, path, operation in _operations(document):
        if method not in ("post", "patch") or not path.startswith("/v1/"):
            continue
        (key,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
        assert key["schema"]["pattern"] == IDEMPOTENCY_KEY_PATTERN
        if key["required"]:
            required.add(path)
    assert required == {"/v1/payments", "/v1/transfers"}


@given(st.from_regex(IDEMPOTENCY_KEY_PATTERN, fullmatch=True))
def test_every_key_the_document_allows_is_accepted(value: str) -> None:
    assert parse_idempotency_key([value]) is not None


@pytest.mark.parametrize(
    "value", ["", "a b", "a,b", '"a', '""', "é", "x" * 256, '"' + "x" * 256 + '"', '"\\n"']
)
def test_keys_the_server_refuses_are_outside_the_grammar(value: str) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        parse_idempotency_key([value])
    assert re.fullmatch(IDEMPOTENCY_KEY_PATTERN, value) is None


def test_files_and_streams_have_their_real_media_types(document: dict[str, Any]) -> None:
    jobs = document["paths"]
    result = jobs["/v1/jobs/{job_id}/result"]["get"]["responses"]["200"]["content"]
    assert set(result) == {"text/csv", "application/json", "application/pdf"}
    events = jobs["/v1/jobs/{job_id}/events"]["get"]["responses"]
    assert (
        _ref("JobStreamEvent") in events["200"]["content"]["text/event-stream"]["schema"]["anyOf"]
    )
    assert "204" in events


def test_the_problem_catalogue_is_in_the_document(document: dict[str, Any]) -> None:
    catalogue = document["components"]["schemas"]["Problem"]["x-problem-types"]
    assert catalogue["bad-request"]["status"] == 400
    assert set(catalogue) == set(CATALOGUE)


def test_hand_read_bodies_are_one_referenced_schema(document: dict[str, Any]) -> None:
    payment = document["paths"]["/v1/payments/{payment_id}"]["patch"]["requestBody"]["content"]
    assert set(payment) == {"application/json", "application/merge-patch+json"}
    assert all(media["schema"] == _ref("PaymentUpdate") for media in payment.values())
    document_patch = document["paths"]["/v1/documents/{document_id}"]["patch"]["requestBody"]
    assert document_patch["content"] == {
        "application/merge-patch+json": {"schema": _ref("DocumentPatch")}
    }


def test_links_chain_created_resources_to_their_next_calls(document: dict[str, Any]) -> None:
    by_id = {op["operationId"]: (m, p) for m, p, op in _operations(document)}
    links = {}
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            for name, link in response.get("links", {}).items():
                assert link["operationId"] in by_id, (method, path, status, name)
                links[(method, path, status, name)] = (by_id[link["operationId"]], link)
    target, link = links[("post", "/v1/payments", "201", "GetPayment")]
    assert target == ("get", "/v1/payments/{payment_id}")
    assert link["parameters"] == {"payment_id": "$response.body#/id"}
    target, link = links[("post", "/v1/payments", "201", "SettlePayment")]
    assert link["parameters"]["header.If-Match"] == "$response.header.ETag"
    for name, path in [
        ("JobEvents", "/v1/jobs/{job_id}/events"),
        ("JobResult", "/v1/jobs/{job_id}/result"),
    ]:
        assert links[("post", "/v1/reports", "202", name)][0] == ("get", path)
    for name in ("GetDocument", "ReplaceDocument"):
        assert ("post", "/v1/documents", "201", name) in links


def test_conditional_headers_have_one_name_whoever_reads_them(document: dict[str, Any]) -> None:
    """A dependency (`Conditions`) or a `Header` parameter: either way the same `If-Match`."""
    item = document["paths"]["/v1/webhook-endpoints/{endpoint_id}"]
    for method in ("patch", "delete"):
        names = [p["name"] for p in item[method]["parameters"] if p["in"] == "header"]
        assert names.count("If-Match") == 1, (method, names)
        assert "if-match" not in names
    link = item["get"]["responses"]["200"]["links"]["UpdateEndpoint"]
    assert link["parameters"]["header.If-Match"] == "$response.header.ETag"


async def test_what_the_handlers_send_is_what_the_schemas_say(client: httpx.AsyncClient) -> None:
    """Every resource, as the service renders it, against the schema the document names."""
    valid = schema_validators(
        (await client.get("/openapi.json")).json(), DRAFT202012, Draft202012Validator
    )

    async def check(name: str, status: int, answer: Any) -> dict[str, Any]:
        response = await answer
        assert response.status_code == status, response.text
        body: dict[str, Any] = response.json()
        valid(f"#/components/schemas/{name}").validate(body)
        return {**body, "headers": response.headers}

    def key() -> dict[str, str]:
        return {"idempotency-key": str(uuid.uuid4())}

    money = {"amount": 1250, "currency": "EUR"}
    made = await check(
        "Payment", 201, client.post("/v1/payments", json={**money, "order_id": 7}, headers=key())
    )
    url = made["headers"]["location"]
    await check("Payment", 200, client.get(url))
    await check("PaymentList", 200, client.get("/v1/payments"))
    settle = {"if-match": made["headers"]["etag"]}
    await check("Payment", 200, client.patch(url, json={"status": "failed"}, headers=settle))

    ledgers = [
        await check(
            "LedgerAccount",
            201,
            client.post("/v1/ledger-accounts", json={"currency": "EUR", "balance": b}),
        )
        for b in (5000, 0)
    ]
    await check("LedgerAccount", 200, client.get(f"/v1/ledger-accounts/{ledgers[0]['id']}"))
    move = {**money, "from": ledgers[0]["id"], "to": ledgers[1]["id"]}
    transfer = await check("Transfer", 201, client.post("/v1/transfers", json=move, headers=key()))
    await check("Transfer", 200, client.get(f"/v1/transfers/{transfer['id']}"))

    await check("Document", 201, client.post("/v1/documents", json={"title": "t"}))
    created_here = {"if-none-match": "*"}
    await check(
        "Document", 201, client.put("/v1/documents/mine", json={"title": "t"}, headers=created_here)
    )

    report = {"period": "2026-06", "format": "csv"}
    job = await check("Job", 202, client.post("/v1/reports", json=report))
    await check("Job", 200, client.get(f"/v1/jobs/{job['id']}"))
    await check("JobList", 200, client.get("/v1/jobs"))
    await check("Job", 200, client.post(f"/v1/jobs/{job['id']}/cancel"))

    hook = {"url": "https://hooks.example.com/ustun", "events": ["payment.*"]}
    endpoint = await check(
        "WebhookEndpointWithSecret", 201, client.post("/v1/webhook-endpoints", json=hook)
    )
    at = f"/v1/webhook-endpoints/{endpoint['id']}"
    read = await client.get(at)
    await check(
        "WebhookEndpoint",
        200,
        client.patch(at, json={"description": "d"}, headers={"if-match": read.headers["etag"]}),
    )
    await check("WebhookEndpointList", 200, client.get("/v1/webhook-endpoints"))
    await check("WebhookEndpointWithSecret", 200, client.post(f"{at}/rotate-secret"))
    ping = await check("Event", 202, client.post(f"{at}/test"))
    await check(
        "Recovery", 202, client.post(f"{at}/recover", json={"since": "2026-01-01T00:00:00Z"})
    )

    await check("Event", 200, client.get(f"/v1/events/{ping['id']}"))
    await check("EventList", 200, client.get("/v1/events"))
    await check("EventTypeList", 200, client.get("/v1/event-types"))
    deliveries = await check("DeliveryList", 200, client.get("/v1/deliveries"))
    assert deliveries["data"]
    await check(
        "DeliveryWithAttempts", 200, client.get(f"/v1/deliveries/{deliveries['data'][0]['id']}")
    )


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
