"""An endpoint's `rate_limit` is bounded where it enters: 0.01 (one send per 100 s) to 10,000
sends/s, finite. A tiny rate accepted once made every claim overflow its pacing step, which
stopped delivery for every account (issue 26, item 1)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from ustun.errors import ProblemError
from ustun.http.etag import EntityTagMatch
from ustun.http.preconditions import Preconditions
from ustun.keys import secret_box
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.settings import Settings
from ustun.store import Database
from ustun.webhooks import endpoints, operations

HOOK = "https://hooks.example.com/ustun"
# The bounds, as docs/webhooks.md and the OpenAPI document state them.
MIN_RATE_LIMIT, MAX_RATE_LIMIT = 0.01, 10_000
ANY = Preconditions(if_match=EntityTagMatch(any=True))
# Written out as JSON text: Python's JSON reader turns `1e400` into inf and takes `NaN`.
REFUSED = ["1e-300", "1e-13", "0", "-1", "0.0099", "10000.5", "1e400", "-1e400", "NaN"]


def _refused_rate_limit(answer: httpx.Response) -> None:
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/validation-error")
    assert [e["field"] for e in problem["errors"]] == ["body.rate_limit"]


async def _send(client: httpx.AsyncClient, method: str, path: str, body: str) -> httpx.Response:
    """`body` as raw JSON text (a PATCH with `If-Match: *`)."""
    headers = {"content-type": "application/json"}
    if method == "PATCH":
        headers["if-match"] = "*"
    return await client.request(method, path, content=body, headers=headers)


@pytest.mark.parametrize("rate", REFUSED)
async def test_a_rate_limit_out_of_bounds_is_refused_on_create(
    client: httpx.AsyncClient, rate: str
) -> None:
    body = f'{{"url": "{HOOK}", "rate_limit": {rate}}}'
    _refused_rate_limit(await _send(client, "POST", "/v1/webhook-endpoints", body))
    listed = (await client.get("/v1/webhook-endpoints")).json()
    assert listed["data"] == []


@pytest.mark.parametrize("rate", REFUSED)
async def test_a_rate_limit_out_of_bounds_is_refused_on_patch(
    client: httpx.AsyncClient, rate: str
) -> None:
    made = await client.post("/v1/webhook-endpoints", json={"url": HOOK, "rate_limit": 5})
    assert made.status_code == 201, made.text
    path = made.headers["location"]
    _refused_rate_limit(await _send(client, "PATCH", path, f'{{"rate_limit": {rate}}}'))
    assert (await client.get(path)).json()["rate_limit"] == 5


async def test_the_bounds_themselves_and_no_limit_are_accepted(client: httpx.AsyncClient) -> None:
    made = await client.post(
        "/v1/webhook-endpoints", json={"url": HOOK, "rate_limit": MIN_RATE_LIMIT}
    )
    assert made.status_code == 201, made.text
    assert made.json()["rate_limit"] == MIN_RATE_LIMIT
    path = made.headers["location"]
    for rate in (MAX_RATE_LIMIT, None):
        changed = await client.patch(path, json={"rate_limit": rate}, headers={"if-match": "*"})
        assert changed.status_code == 200, changed.text
        assert changed.json()["rate_limit"] == rate


async def test_the_openapi_document_states_the_bounds(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    for model in ("EndpointIn", "EndpointPatch", "WebhookEndpoint"):
        rate = schemas[model]["properties"]["rate_limit"]
        [number] = [s for s in rate["anyOf"] if s.get("type") == "number"]
        assert (number["minimum"], number["maximum"]) == (MIN_RATE_LIMIT, MAX_RATE_LIMIT), model
        assert "0.01" in rate["description"], model


@pytest.mark.parametrize("rate", [1e-300, 1e-13, 0.0, float("inf"), float("nan"), 10_001.0])
async def test_the_library_operations_refuse_it_too(
    db: Database, settings: Settings, rate: float
) -> None:
    """`webhooks.operations` (the API's and the dashboard's path) and `endpoints.create` take
    fields without the API's body model: they check the bounds themselves."""
    key = await create_key(db, f"bounds-{uuid.uuid4().hex[:12]}")
    account = await account_for_key(db, key)
    assert account is not None
    box = secret_box(settings)
    with pytest.raises(ProblemError) as refused:
        await operations.create_endpoint(
            db,
            box,
            account.id,
            {"url": HOOK, "events": ["*"], "rate_limit": rate},
            max_endpoints=10,
            allow_private=False,
        )
    assert refused.value.extensions["errors"][0]["field"] == "body.rate_limit"
    row, _ = await operations.create_endpoint(
        db, box, account.id, {"url": HOOK, "events": ["*"]}, max_endpoints=10, allow_private=False
    )
    with pytest.raises(ProblemError):
        await operations.update_endpoint(
            db, box, account.id, row.id, {"rate_limit": rate}, ANY, allow_private=False
        )
    async with db.unit_of_work() as uow:
        with pytest.raises(ValueError, match="rate limit"):
            await endpoints.create(uow, box, account.id, url=HOOK, events=["*"], rate_limit=rate)
