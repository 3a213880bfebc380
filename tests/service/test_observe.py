"""Access logs: one JSON line per request, with the request id its problem body names."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from ustun.logs import ACCESS_LOGGER, JsonFormatter


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


async def test_the_access_line_writes_what_any_other_line_would(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The access line's fast path leaves out no extra and masks a key sent in the URL."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    response = await client.get("/v1/payments/ustun_sk_leaked0123456789")
    assert response.status_code == 404
    (record,) = [r for r in caplog.records if r.name == ACCESS_LOGGER]
    fast = json.loads(JsonFormatter().format(record))
    record.name = "ustun.other"  # the same record through the general path
    general = json.loads(JsonFormatter().format(record))
    assert fast == general | {"logger": ACCESS_LOGGER}
    assert "ustun_sk_leaked" not in json.dumps(fast)
