"""Methods of every route: a 405's `Allow` lists them all (RFC 9110 §15.5.6), HEAD is GET
without the body (§9.3.2)."""

from __future__ import annotations

import re

import anyio
import httpx
import pytest
from fastapi.routing import iter_route_contexts

from job_kinds import finished, running
from ustun import jobs
from ustun.service import create_app
from ustun.service.plumbing.accounts import account_for_key
from ustun.settings import Settings
from ustun.store import Database

# Every /v1 path template → exactly the methods it answers.
V1_ALLOW: dict[str, set[str]] = {
    "/v1/payments": {"GET", "HEAD", "POST"},
    "/v1/payments/{payment_id}": {"GET", "HEAD", "PATCH"},
    "/v1/ledger-accounts": {"POST"},
    "/v1/ledger-accounts/{ledger_account_id}": {"GET", "HEAD"},
    "/v1/transfers": {"POST"},
    "/v1/transfers/{transfer_id}": {"GET", "HEAD"},
    "/v1/documents": {"POST"},
    "/v1/documents/{document_id}": {"DELETE", "GET", "HEAD", "PATCH", "PUT"},
    "/v1/reports": {"POST"},
    "/v1/jobs": {"GET", "HEAD"},
    "/v1/jobs/{job_id}": {"GET", "HEAD"},
    "/v1/jobs/{job_id}/cancel": {"POST"},
    "/v1/jobs/{job_id}/result": {"GET", "HEAD"},
    "/v1/jobs/{job_id}/events": {"GET", "HEAD"},
    "/v1/webhook-endpoints": {"GET", "HEAD", "POST"},
    "/v1/webhook-endpoints/{endpoint_id}": {"DELETE", "GET", "HEAD", "PATCH"},
    "/v1/webhook-endpoints/{endpoint_id}/rotate-secret": {"POST"},
    "/v1/webhook-endpoints/{endpoint_id}/test": {"POST"},
    "/v1/webhook-endpoints/{endpoint_id}/recover": {"POST"},
    "/v1/webhook-endpoints/{endpoint_id}/head": {"GET", "HEAD"},
    "/v1/events": {"GET", "HEAD"},
    "/v1/events/{event_id}": {"GET", "HEAD"},
    "/v1/events/{event_id}/expunge": {"POST"},
    "/v1/event-types": {"GET", "HEAD"},
    "/v1/deliveries": {"GET", "HEAD"},
    "/v1/deliveries/{delivery_id}": {"GET", "HEAD"},
    "/v1/deliveries/{delivery_id}/retry": {"POST"},
    "/v1/api-keys": {"GET", "HEAD", "POST"},
    "/v1/api-keys/{key_id}": {"DELETE"},
    "/v1/portal-sessions": {"POST"},
    "/v1/portal-sessions/{session_id}": {"DELETE", "GET", "HEAD"},
}
# Outside /v1 the same rule holds, for any router of the app.
OTHER_ALLOW: dict[str, set[str]] = {
    "/healthz": {"GET", "HEAD"},
    "/problems/{slug}": {"GET", "HEAD"},
    "/dashboard/login": {"GET", "HEAD", "POST"},
    "/dashboard/jobs/{job_id}/cancel": {"POST"},
    "/portal/": {"GET", "HEAD"},
}
METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _concrete(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "x_1", template)


def test_the_table_covers_every_v1_route(settings: Settings) -> None:
    app = create_app(settings)
    templates = {c.path for c in iter_route_contexts(app.routes) if c.path.startswith("/v1/")}
    assert templates == set(V1_ALLOW)


@pytest.mark.parametrize(("template", "allowed"), [*V1_ALLOW.items(), *OTHER_ALLOW.items()])
async def test_every_405_lists_every_method_of_the_resource(
    client: httpx.AsyncClient, template: str, allowed: set[str]
) -> None:
    refused = [m for m in METHODS if m not in allowed]
    for method in refused:
        answer = await client.request(method, _concrete(template))
        assert answer.status_code == 405, (method, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        if method != "HEAD":
            assert answer.json()["type"].endswith("/problems/method-not-allowed")
        assert set(answer.headers["allow"].split(", ")) == allowed, method


def _same_headers(response: httpx.Response) -> dict[str, str]:
    return {
        k: v for k, v in response.headers.items() if k not in ("x-request-id", "date", "ratelimit")
    }


async def test_head_is_get_without_the_body_wherever_get_is(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account = await account_for_key(db, api_key)
    assert account is not None
    job = await jobs.enqueue(db, "flaky", {"succeed_on": 1}, account_id=account.id)
    async with running(db):
        await finished(db, job.id, account.id)
    paid = await client.post(
        "/v1/payments", json={"amount": 100, "currency": "EUR"}, headers={"idempotency-key": "k1"}
    )
    urls = [
        f"/v1/jobs/{job.id}/result",  # issue 17: was 405
        f"/v1/jobs/{job.id}",
        "/v1/jobs",
        paid.headers["location"],
        "/v1/payments",
        "/v1/events",
        "/v1/event-types",
        "/v1/deliveries",
        "/v1/webhook-endpoints",
        "/v1/payments/pay_missing",
    ]
    for url in urls:
        got, head = await client.get(url), await client.head(url)
        assert head.status_code == got.status_code, url
        assert head.content == b"", url
        assert _same_headers(head) == _same_headers(got), url
    result = await client.head(f"/v1/jobs/{job.id}/result")
    assert (result.status_code, result.headers["content-length"]) == (200, "2")
    assert result.headers["content-disposition"] == 'attachment; filename="ok.txt"'


async def test_head_of_a_live_event_stream_answers_at_once(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account = await account_for_key(db, api_key)
    assert account is not None
    job = await jobs.enqueue(db, "slow", {"seconds": 5}, account_id=account.id)
    # The GET would stream until the job ends, and no worker runs it: any bound tells them
    # apart. 3 s was overrun once on a loaded machine (load 14).
    with anyio.fail_after(10):
        head = await client.head(f"/v1/jobs/{job.id}/events")
    assert head.status_code == 200
    assert head.headers["content-type"].startswith("text/event-stream")
    assert head.content == b""
    await jobs.cancel(db, job.id, account_id=account.id)
