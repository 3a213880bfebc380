"""Access logs: one JSON line per request, with the request id its problem body names."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from ustun.logs import JsonFormatter


async def test_problem_instance_and_log_line_share_the_request_id(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ustun.access")
    response = await client.get("/v1/payments", params={"limit": 0})
    assert response.status_code == 422
    request_id = response.headers["x-request-id"]
    assert response.json()["instance"] == f"urn:ustun:request:{request_id}"
    (record,) = [r for r in caplog.records if r.name == "ustun.access"]
    entry = json.loads(JsonFormatter().format(record))
    assert entry["request_id"] == request_id
    assert entry["route"] == "/v1/payments"
    assert entry["status"] == 422
    assert entry["duration_ms"] >= 0
    assert "authorization" not in json.dumps(entry).lower()
