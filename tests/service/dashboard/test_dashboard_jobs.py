"""Dashboard pages of the jobs pillar, over HTTP: list, detail, cancel, the live stream."""

from __future__ import annotations

import json
import uuid

import httpx
from fastapi import FastAPI

from dashboard_support import log_in
from ustun.http.sse_parser import EventStreamParser
from ustun.service.plumbing.accounts import create_key


async def _report_job(app: FastAPI, api_key: str) -> str:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    ) as api:
        accepted = await api.post("/v1/reports", json={"period": "2026", "format": "csv"})
    assert accepted.status_code == 202, accepted.text
    job_id: str = accepted.json()["id"]
    return job_id


async def test_list_detail_cancel_and_stream(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str
) -> None:
    job_id = await _report_job(app, api_key)
    csrf = await log_in(browser, api_key)

    listing = await browser.get("/dashboard/jobs", params={"status": "pending"})
    assert job_id in listing.text
    assert job_id not in (await browser.get("/dashboard/jobs", params={"status": "done"})).text
    detail = await browser.get(f"/dashboard/jobs/{job_id}")
    assert f'data-job-stream="/dashboard/jobs/{job_id}/events"' in detail.text

    assert (await browser.post(f"/dashboard/jobs/{job_id}/cancel")).status_code == 403
    cancelled = await browser.post(f"/dashboard/jobs/{job_id}/cancel", data={"csrf_token": csrf})
    assert cancelled.status_code == 303
    detail = await browser.get(f"/dashboard/jobs/{job_id}")
    assert ">cancelled<" in detail.text
    assert "data-job-stream" not in detail.text

    stream = await browser.get(f"/dashboard/jobs/{job_id}/events")
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert "event: status" in stream.text
    assert '"status": "cancelled"' in stream.text

    overview = await browser.get("/dashboard")
    assert 'data-figure="jobs"' in overview.text


async def test_another_account_cannot_see_or_follow_a_job(app: FastAPI, api_key: str) -> None:
    job_id = await _report_job(app, api_key)
    other_key = await create_key(app.state.db, f"other-{uuid.uuid4().hex[:8]}")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as other:
        await log_in(other, other_key)
        assert job_id not in (await other.get("/dashboard/jobs")).text
        assert (await other.get(f"/dashboard/jobs/{job_id}")).status_code == 404
        assert (await other.get(f"/dashboard/jobs/{job_id}/events")).status_code == 404
        assert (await other.get(f"/dashboard/jobs/{job_id}/result")).status_code == 404


async def test_the_live_stream_stops_reconnections_and_refuses_bad_ids(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str
) -> None:
    job_id = await _report_job(app, api_key)
    csrf = await log_in(browser, api_key)
    url = f"/dashboard/jobs/{job_id}/events"
    assert (await browser.get(url, headers={"last-event-id": str(2**63)})).status_code == 400
    await browser.post(f"/dashboard/jobs/{job_id}/cancel", data={"csrf_token": csrf})

    first = await browser.get(url)
    parser = EventStreamParser()
    events = parser.feed(first.content)
    assert (first.status_code, events[0].retry) == (200, 1000)
    assert json.loads(events[-1].data)["status"] == "cancelled"
    again = await browser.get(url, headers={"last-event-id": parser.last_event_id})
    assert (again.status_code, again.content) == (204, b"")
    for value in (str(2**63), "-1"):
        refused = await browser.get(url, headers={"last-event-id": value})
        assert refused.status_code == 400
        assert refused.json()["type"].endswith("/problems/bad-request")
