"""`/metrics`: HTTP requests by route template, pillar events, gauges read at scrape time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncConnection

from ustun import instrumentation
from ustun.service.plumbing.metrics import QueueStat


@pytest.fixture
async def http(app: FastAPI, api_key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    ) as client:
        yield client


async def _samples(http: httpx.AsyncClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def _key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def test_requests_are_counted_by_route_template_and_status(http: httpx.AsyncClient) -> None:
    await http.get("/v1/payments")
    await http.get("/v1/payments", params={"limit": 0})
    for n in range(3):
        await http.get(f"/no/such/{n}")
    samples = await _samples(http)
    assert (
        samples[_key("ustun_http_requests_total", method="GET", route="/v1/payments", status="200")]
        == 1
    )
    assert (
        samples[_key("ustun_http_requests_total", method="GET", route="/v1/payments", status="422")]
        == 1
    )
    assert (
        samples[_key("ustun_http_requests_total", method="GET", route="<unmatched>", status="404")]
        == 3
    )
    assert not any("/no/such" in str(labels) for _, labels in samples)
    assert (
        samples[
            _key("ustun_http_request_duration_seconds_count", method="GET", route="/v1/payments")
        ]
        == 2
    )


async def test_unauthenticated_requests_are_counted_too(app: FastAPI) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as anonymous:
        assert (await anonymous.get("/v1/payments")).status_code == 401
        samples = await _samples(anonymous)
    assert (
        samples[_key("ustun_http_requests_total", method="GET", route="/v1/payments", status="401")]
        == 1
    )


async def test_pillar_events_become_metrics(http: httpx.AsyncClient) -> None:
    instrumentation.emit("idempotency", outcome="replayed")
    instrumentation.emit("idempotency", outcome="replayed")
    instrumentation.emit("delivery_attempt", 0.2, outcome="failed")
    samples = await _samples(http)
    assert samples[_key("ustun_idempotency_requests_total", outcome="replayed")] == 2
    assert samples[_key("ustun_webhook_delivery_attempts_total", outcome="failed")] == 1
    assert samples[_key("ustun_webhook_delivery_duration_seconds_sum", outcome="failed")] == 0.2


async def test_queue_gauges_are_read_at_scrape_time(app: FastAPI, http: httpx.AsyncClient) -> None:
    depth = [0]

    async def probe(conn: AsyncConnection) -> list[QueueStat]:
        return [QueueStat("test", depth[0], 12.5 if depth[0] else 0.0)]

    app.state.metrics.queue_probes.append(probe)
    assert (await _samples(http))[_key("ustun_queue_depth", queue="test")] == 0
    depth[0] = 7
    samples = await _samples(http)
    assert samples[_key("ustun_queue_depth", queue="test")] == 7
    assert samples[_key("ustun_queue_oldest_due_age_seconds", queue="test")] == 12.5


async def test_idempotency_outcomes_are_counted(http: httpx.AsyncClient) -> None:
    payment = {"amount": 100, "currency": "EUR"}
    key = {"idempotency-key": "metrics-1"}
    assert (await http.post("/v1/payments", json=payment, headers=key)).status_code == 201
    replay = await http.post("/v1/payments", json=payment, headers=key)
    assert replay.headers["idempotent-replayed"] == "true"
    reused = await http.post("/v1/payments", json={**payment, "amount": 5}, headers=key)
    assert reused.status_code == 422
    samples = await _samples(http)
    for outcome in ("executed", "replayed", "reused"):
        assert samples[_key("ustun_idempotency_requests_total", outcome=outcome)] == 1, outcome
