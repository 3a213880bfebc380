"""Wire details of issue 28: a 201's `Date` is never before its `Last-Modified`, a malformed
`If-Match` is a 400, and the OpenAPI schemas state what the server accepts and sends (event
patterns, an event's `data`, a failed job's `error`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator
from referencing.jsonschema import DRAFT202012

from support import problem_of, schema_validators
from ustun.http.dates import parse_http_date
from ustun.http.problem import problem
from ustun.service.specs import asyncapi
from ustun.service.specs.event_types import CATALOGUE

Validators = Callable[[str], Validator]


@pytest.fixture
async def openapi(client: httpx.AsyncClient) -> Validators:
    """Validators of the served OpenAPI document's component schemas."""
    document = (await client.get("/openapi.json")).json()
    return schema_validators(document, DRAFT202012, Draft202012Validator)


def _key() -> dict[str, str]:
    return {"idempotency-key": str(uuid.uuid4())}


async def test_a_201_is_never_modified_after_its_date(client: httpx.AsyncClient) -> None:
    """RFC 9110 §8.8.2.1: an origin server MUST NOT send a Last-Modified later than its Date.
    Sent from the clock as the answer starts, `Date` comes after whatever the request wrote."""
    money = {"amount": 100, "currency": "EUR"}
    for _ in range(20):
        created = await client.post("/v1/payments", json=money, headers=_key())
        assert created.status_code == 201, created.text
        assert created.headers.get_list("date") == [created.headers["date"]]
        sent = parse_http_date(created.headers["date"])
        modified = parse_http_date(created.headers["last-modified"])
        assert sent is not None
        assert modified is not None
        assert modified <= sent


@pytest.mark.parametrize("value", ["1", "3, 4", 'W/ "1"', '"1", *'])
async def test_a_malformed_if_match_is_400_and_changes_nothing(
    client: httpx.AsyncClient, value: str
) -> None:
    """RFC 9110 §13.1.1: If-Match = "*" / #entity-tag. Outside that grammar nothing can match,
    so it is a bad request (400 `precondition-invalid`), not a false precondition (412)."""
    document = await client.post("/v1/documents", json={"title": "Plan"})
    payment = await client.post(
        "/v1/payments", json={"amount": 5, "currency": "EUR"}, headers=_key()
    )
    hook = await client.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/a"})
    bad = {"if-match": value}
    merge = {**bad, "content-type": "application/merge-patch+json"}
    writes = [
        client.put(document.headers["location"], json={"title": "x"}, headers=bad),
        client.patch(document.headers["location"], json={"title": "x"}, headers=merge),
        client.delete(document.headers["location"], headers=bad),
        client.patch(payment.headers["location"], json={"status": "failed"}, headers=bad),
        client.patch(
            f"/v1/webhook-endpoints/{hook.json()['id']}", json={"description": "x"}, headers=bad
        ),
        client.get(document.headers["location"], headers=bad),
    ]
    for write in writes:
        body = problem_of(await write, 400, "precondition-invalid")
        assert body["header"] == "If-Match"
        assert '`"3"`' in body["detail"]
    assert (await client.get(document.headers["location"])).json()["version"] == 1
    assert (await client.get(payment.headers["location"])).json()["status"] == "pending"
    stale = await client.put(
        document.headers["location"], json={"title": "x"}, headers={"if-match": '"1.0"'}
    )
    problem_of(stale, 412, "precondition-failed")


async def test_the_document_lists_the_400_wherever_if_match_is_read(
    client: httpx.AsyncClient,
) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    taking = [
        (path, method, operation)
        for path, item in paths.items()
        for method, operation in item.items()
        if any(p["name"] == "If-Match" for p in operation.get("parameters", ()))
    ]
    assert len(taking) >= 6
    for path, method, operation in taking:
        assert "precondition-invalid" in operation["responses"]["400"]["x-problems"], (path, method)


REFUSED_PATTERNS = ["", " ", "payment.", "Payment.*", "payment.**", "*.created", "pay-ment"]
ACCEPTED_PATTERNS = ["*", "payment.*", "payment.succeeded", "a_b.c1.*"]


@pytest.mark.parametrize("pattern", REFUSED_PATTERNS)
async def test_an_event_pattern_the_server_refuses_is_outside_the_schema(
    client: httpx.AsyncClient, openapi: Validators, pattern: str
) -> None:
    body = {"url": "https://hooks.example.com/b", "events": [pattern]}
    assert not openapi("#/components/schemas/EndpointIn").is_valid(body)
    assert not openapi("#/components/schemas/EndpointPatch").is_valid({"events": [pattern]})
    refused = await client.post("/v1/webhook-endpoints", json=body)
    assert problem_of(refused, 422, "validation-error")["errors"][0]["field"] == "body.events"


@pytest.mark.parametrize("pattern", ACCEPTED_PATTERNS)
async def test_an_event_pattern_the_server_takes_is_in_the_schema(
    client: httpx.AsyncClient, openapi: Validators, pattern: str
) -> None:
    body = {"url": "https://hooks.example.com/c", "events": [pattern]}
    openapi("#/components/schemas/EndpointIn").validate(body)
    made = await client.post("/v1/webhook-endpoints", json=body)
    assert made.status_code == 201, made.text
    openapi("#/components/schemas/WebhookEndpointWithSecret").validate(made.json())


async def test_an_events_data_is_the_object_of_its_type(
    client: httpx.AsyncClient, openapi: Validators
) -> None:
    """`Event.data` was any object; it is one of the catalogue's data schemas."""
    paid = await client.post("/v1/payments", json={"amount": 7, "currency": "EUR"}, headers=_key())
    assert paid.status_code == 201, paid.text
    hook = await client.post("/v1/webhook-endpoints", json={"url": "https://hooks.example.com/d"})
    ping = await client.post(f"/v1/webhook-endpoints/{hook.json()['id']}/test")
    assert ping.status_code == 202, ping.text
    logged = (await client.get("/v1/events")).json()["data"]
    assert {"payment.created", "ping"} <= {e["type"] for e in logged}
    event = openapi("#/components/schemas/Event")
    for sent in logged:
        event.validate(sent)
    assert not event.is_valid({**logged[0], "data": {"anything": "at all"}})
    assert not event.is_valid({**logged[0], "data": {}})


def _failed_job(error: Any) -> dict[str, Any]:
    return {
        "id": "job_1",
        "object": "job",
        "kind": "report",
        "status": "failed",
        "progress": 40,
        "created_at": "2026-06-01T12:00:00Z",
        "result_url": None,
        "error": error,
    }


async def test_a_failed_jobs_error_is_a_problem_object(openapi: Validators) -> None:
    """`JobData.error` was any object; it is RFC 9457 problem details, in both documents."""
    events = asyncapi.document(CATALOGUE)
    asyncapi_schemas = schema_validators(events, DRAFT202012, Draft202012Validator)
    failed = problem("job-failed", "The report could not be built.", instance="urn:x")
    for valid in (openapi, asyncapi_schemas):
        job = valid("#/components/schemas/JobData")
        job.validate(_failed_job(failed))
        job.validate(_failed_job(None) | {"status": "done"})
        for wrong in ({"reason": "boom"}, {**failed, "status": "500"}, "boom"):
            assert not job.is_valid(_failed_job(wrong)), wrong
