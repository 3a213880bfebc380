"""An endpoint's payload `filter` through the API (both backends): shown as given, changed and
removed by PATCH, refused with a 422 naming its position, documented in the OpenAPI, and
applied to the events the API emits."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from ustun.webhooks.filters import MAX_CONDITIONS, MAX_DEPTH, MAX_SIZE

HOOK = "https://hooks.example.com/ustun"
BIG = {"amount": {"$gte": 1000}, "currency": {"$in": ["EUR", "USD"]}}


async def _create(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/v1/webhook-endpoints", json={"url": HOOK, **body})


def _refusal(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 422, answer.text
    problem: dict[str, Any] = answer.json()
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert problem["type"].endswith("/problems/validation-error")
    assert problem["detail"] == "Invalid value in body.filter."
    [error] = problem["errors"]
    assert error["field"] == "body.filter"
    return dict(error)


async def test_an_endpoint_shows_its_filter_or_null(client: httpx.AsyncClient) -> None:
    made = await _create(client, filter=BIG)
    assert made.status_code == 201, made.text
    assert made.json()["filter"] == BIG
    got = (await client.get(f"/v1/webhook-endpoints/{made.json()['id']}")).json()
    assert got["filter"] == BIG
    plain = (await _create(client)).json()
    assert plain["filter"] is None
    listed = (await client.get("/v1/webhook-endpoints")).json()["data"]
    assert [e["filter"] for e in listed] == [None, BIG]


def _deep(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        spec = {"$or": [spec]}
    return spec


@pytest.mark.parametrize(
    ("spec", "position", "words"),
    [
        ({"amount": {"$gtx": 1}}, "filter.amount.$gtx", "unknown operator `$gtx`"),
        (
            {"$and": [{"a": 1}, {"amount": {"$gt": [1]}}]},
            "filter.$and[1].amount.$gt",
            "compares with a number or a string",
        ),
        ({"status": {"$in": "paid"}}, "filter.status.$in", "takes a list"),
        ({"$or": []}, "filter.$or", "non-empty list"),
        ({"a..b": 1}, "filter.a..b", "none of them empty"),
        (_deep(MAX_DEPTH + 1), "filter" + ".$or[0]" * MAX_DEPTH, f"at most {MAX_DEPTH} deep"),
        ({f"f{i}": i for i in range(MAX_CONDITIONS + 1)}, f"filter.f{MAX_CONDITIONS}", "at most"),
        ({"note": "x" * MAX_SIZE}, "filter", f"at most {MAX_SIZE}"),
    ],
)
async def test_a_refused_filter_is_a_422_naming_its_position(
    client: httpx.AsyncClient, spec: dict[str, Any], position: str, words: str
) -> None:
    error = _refusal(await _create(client, filter=spec))
    assert error["type"] == "filter"
    assert error["message"].startswith(f"{position}: ")
    assert words in error["message"]
    assert (await client.get("/v1/webhook-endpoints")).json()["data"] == []


async def test_a_filter_that_is_not_an_object_is_a_422(client: httpx.AsyncClient) -> None:
    for wrong in ("amount", ["amount"], 1):
        assert _refusal(await _create(client, filter=wrong))["type"] == "dict_type"


async def test_patch_sets_changes_and_removes_the_filter(client: httpx.AsyncClient) -> None:
    made = (await _create(client)).json()
    path = f"/v1/webhook-endpoints/{made['id']}"
    added = await client.patch(path, json={"filter": BIG}, headers={"if-match": '"1"'})
    assert added.status_code == 200, added.text
    assert added.json()["filter"] == BIG
    assert added.headers["etag"] == '"2"'
    refused = await client.patch(path, json={"filter": {"$not": 1}}, headers={"if-match": '"2"'})
    assert _refusal(refused)["message"].startswith("filter.$not: ")
    assert (await client.get(path)).json()["filter"] == BIG
    other = {"currency": "EUR"}
    changed = await client.patch(path, json={"filter": other}, headers={"if-match": '"2"'})
    assert changed.json()["filter"] == other
    kept = await client.patch(path, json={"description": "d"}, headers={"if-match": '"3"'})
    assert kept.json()["filter"] == other
    removed = await client.patch(path, json={"filter": None}, headers={"if-match": '"4"'})
    assert removed.status_code == 200, removed.text
    assert removed.json()["filter"] is None


async def test_the_openapi_documents_the_filter(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    for model in ("EndpointIn", "EndpointPatch"):
        field = schemas[model]["properties"]["filter"]
        assert "$gte" in field["description"]
        assert {"type": "object", "additionalProperties": True} in field["anyOf"]


async def _pay(client: httpx.AsyncClient, amount: int) -> str:
    made = await client.post(
        "/v1/payments",
        json={"amount": amount, "currency": "EUR"},
        headers={"idempotency-key": str(uuid.uuid4())},
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def test_the_api_emits_deliveries_only_where_the_filter_passes(
    client: httpx.AsyncClient,
) -> None:
    big = (await _create(client, events=["payment.*"], filter=BIG)).json()["id"]
    plain = (await _create(client, events=["payment.*"])).json()["id"]
    small, large = await _pay(client, 500), await _pay(client, 5000)
    sent = {}
    for endpoint_id in (big, plain):
        page = await client.get("/v1/deliveries", params={"endpoint_id": endpoint_id})
        sent[endpoint_id] = [
            (await client.get(f"/v1/events/{d['event_id']}")).json()["data"]["id"]
            for d in page.json()["data"]
        ]
    assert sent[big] == [large]
    assert sorted(sent[plain]) == sorted([small, large])
