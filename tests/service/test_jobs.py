"""`/v1/jobs`: the job resource, conditional GET, listing, cancel, and the SSE stream."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from job_kinds import eventually, finished, running
from ustun import jobs
from ustun.http.sse_parser import Event, EventStreamParser
from ustun.service.plumbing.accounts import account_for_key
from ustun.store import Database


async def _account(db: Database, api_key: str) -> str:
    account = await account_for_key(db, api_key)
    assert account is not None
    return account.id


async def test_a_job_resource_with_etag_retry_after_and_304(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account_id = await _account(db, api_key)
    job = await jobs.enqueue(db, "slow", {"seconds": 0.2}, account_id=account_id)
    got = await client.get(f"/v1/jobs/{job.id}")
    assert got.status_code == 200
    body = got.json()
    assert {k: body[k] for k in ("id", "kind", "status", "progress", "result_url", "error")} == {
        "id": job.id,
        "kind": "slow",
        "status": "pending",
        "progress": 0,
        "result_url": None,
        "error": None,
    }
    assert body["started_at"] is None
    assert body["completed_at"] is None
    assert got.headers["etag"] == '"1"'
    assert got.headers["retry-after"] == "1"

    same = await client.get(f"/v1/jobs/{job.id}", headers={"if-none-match": '"1"'})
    assert same.status_code == 304
    assert same.content == b""
    assert same.headers["etag"] == '"1"'

    async with running(db):
        await finished(db, job.id, account_id)
    changed = await client.get(f"/v1/jobs/{job.id}", headers={"if-none-match": '"1"'})
    assert changed.status_code == 200
    assert changed.json()["status"] == "done"
    assert changed.headers["etag"] != '"1"'
    assert "retry-after" not in changed.headers
    assert changed.json()["completed_at"] is not None


async def test_jobs_are_per_account(client: httpx.AsyncClient, db: Database, api_key: str) -> None:
    theirs = await jobs.enqueue(db, "slow", account_id=None)
    for path in (f"/v1/jobs/{theirs.id}", f"/v1/jobs/{theirs.id}/events"):
        missing = await client.get(path)
        assert missing.status_code == 404
        assert missing.json()["type"].endswith("/problems/not-found")
    assert (await client.post(f"/v1/jobs/{theirs.id}/cancel")).status_code == 404
    assert (await client.get(f"/v1/jobs/{theirs.id}/result")).status_code == 404
    await jobs.cancel(db, theirs.id, account_id=None)


async def test_list_filters_by_status_and_pages(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account_id = await _account(db, api_key)
    made = [(await jobs.enqueue(db, "slow", account_id=account_id)).id for _ in range(3)]
    await client.post(f"/v1/jobs/{made[0]}/cancel")
    first = (await client.get("/v1/jobs", params={"limit": 2})).json()
    assert [j["id"] for j in first["data"]] == [made[2], made[1]]
    rest = (await client.get("/v1/jobs", params={"cursor": first["next_cursor"]})).json()
    assert [j["id"] for j in rest["data"]] == [made[0]]
    assert rest["next_cursor"] is None
    pending = (await client.get("/v1/jobs", params={"status": "pending"})).json()["data"]
    assert {j["id"] for j in pending} == set(made[1:])
    cancelled = (await client.get("/v1/jobs", params={"status": "cancelled"})).json()["data"]
    assert [j["id"] for j in cancelled] == [made[0]]
    assert (await client.get("/v1/jobs", params={"status": "running"})).status_code == 422
    for job_id in made[1:]:
        await client.post(f"/v1/jobs/{job_id}/cancel")


async def test_cancel_pending_then_cancel_again_is_a_conflict(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    job = await jobs.enqueue(db, "slow", account_id=await _account(db, api_key))
    cancelled = await client.post(f"/v1/jobs/{job.id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    again = await client.post(f"/v1/jobs/{job.id}/cancel")
    assert again.status_code == 409
    assert again.headers["content-type"] == "application/problem+json"
    assert again.json()["type"].endswith("/problems/state-conflict")


async def test_cancel_while_processing(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    job = await jobs.enqueue(db, "slow", {"seconds": 5}, account_id=await _account(db, api_key))
    async with running(db, lease_seconds=1.5):

        async def started() -> bool:
            return bool((await client.get(f"/v1/jobs/{job.id}")).json()["progress"] > 0)

        await eventually(started, what="the job to make progress")
        asked = await client.post(f"/v1/jobs/{job.id}/cancel")
        assert asked.status_code == 200
        assert asked.json()["cancel_requested"] is True
        stopped = await finished(db, job.id, await _account(db, api_key))
    assert stopped.status == "cancelled"


def _events(stream: str) -> list[tuple[int, str, dict[str, object]]]:
    parsed = []
    for block in stream.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")
        )
        if "id" in fields:
            parsed.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return parsed


async def test_sse_streams_to_the_end_and_resumes_with_last_event_id(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    job = await jobs.enqueue(db, "slow", {"seconds": 0.3}, account_id=await _account(db, api_key))
    async with running(db):
        whole = await client.get(f"/v1/jobs/{job.id}/events")
    assert whole.status_code == 200
    assert whole.headers["content-type"].startswith("text/event-stream")
    events = _events(whole.text)
    ids = [event_id for event_id, _, _ in events]
    assert ids == sorted(ids)
    assert ids[0] == 1
    assert events[0][1:] == ("status", {**events[0][2], "status": "pending", "progress": 0})
    assert events[-1][1] == "status"
    assert events[-1][2]["status"] == "done"
    assert any(kind == "progress" for _, kind, _ in events)

    resumed = await client.get(f"/v1/jobs/{job.id}/events", headers={"last-event-id": "3"})
    assert [e for e in _events(resumed.text)] == [e for e in events if e[0] > 3]
    ended = await client.get(f"/v1/jobs/{job.id}/events", headers={"last-event-id": str(ids[-1])})
    assert _events(ended.text) == []


async def test_conditional_get_follows_rfc_9110(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    job = await jobs.enqueue(db, "slow", account_id=await _account(db, api_key))
    url = f"/v1/jobs/{job.id}"
    for matching in ('W/"1"', '"7", "1"', "*"):
        assert (await client.get(url, headers={"if-none-match": matching})).status_code == 304
    assert (await client.get(url, headers={"if-none-match": '"2"'})).status_code == 200
    head = await client.head(url)
    assert (head.status_code, head.headers["etag"]) == (200, '"1"')
    failed = await client.get(url, headers={"if-match": '"9"'})
    assert failed.status_code == 412
    await jobs.cancel(db, job.id, account_id=job.account_id)


async def test_final_states_are_announced_through_the_webhook_outbox(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    account_id = await _account(db, api_key)
    good = await jobs.enqueue(db, "slow", {"seconds": 0.1}, account_id=account_id)
    bad = await jobs.enqueue(db, "broken", account_id=account_id)
    async with running(db):
        await finished(db, good.id, account_id)
        await finished(db, bad.id, account_id)
    events = (await client.get("/v1/events")).json()["data"]
    by_type = {event["type"]: event for event in events}
    assert set(by_type) == {"job.completed", "job.failed"}
    assert by_type["job.completed"]["data"]["id"] == good.id
    assert by_type["job.completed"]["data"]["status"] == "done"
    assert by_type["job.failed"]["data"]["id"] == bad.id
    assert by_type["job.failed"]["data"]["error"]["type"].endswith("/problems/job-failed")
    types = {t["name"] for t in (await client.get("/v1/event-types")).json()["data"]}
    assert {"job.completed", "job.failed"} <= types


def _parsed(response: httpx.Response) -> tuple[list[Event], str]:
    """The events of a whole SSE response, and the last event ID a browser would send back."""
    parser = EventStreamParser()
    events = parser.feed(response.content)
    return events, parser.last_event_id


def _blocks(response: httpx.Response) -> list[str]:
    """The stream's blocks other than comments: what a third-party client turns into messages."""
    return [b for b in response.text.split("\n\n") if b.strip() and not b.startswith(":")]


async def test_a_finished_jobs_stream_is_read_once_then_answers_204(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    job = await jobs.enqueue(db, "slow", {"seconds": 0.1}, account_id=await _account(db, api_key))
    async with running(db):
        done = await finished(db, job.id, job.account_id)
    url = f"/v1/jobs/{job.id}/events"

    first = await client.get(url)  # an EventSource connecting for the first time
    assert first.status_code == 200
    events, last_id = _parsed(first)
    assert events[0].retry == 1000  # in the first event's block, not in a block of its own
    assert all("\ndata: " in block for block in _blocks(first))
    assert json.loads(events[-1].data)["status"] == "done"
    assert last_id == str(done.version)

    # Its reconnection, and any id at or past the final event (beyond the 32-bit version
    # column too): 204, which stops an EventSource for good.
    for seen in (last_id, "2147483648", str(2**63 - 1)):
        again = await client.get(url, headers={"last-event-id": seen})
        assert (again.status_code, again.content) == (204, b""), seen

    middle = await client.get(url, headers={"last-event-id": events[1].id})
    assert middle.status_code == 200
    assert [e.id for e in _parsed(middle)[0]] == [e.id for e in events[2:]]
    assert _parsed(middle)[0][0].retry == 1000


async def test_an_id_past_a_running_jobs_version_streams_what_comes_next(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    job = await jobs.enqueue(db, "slow", account_id=await _account(db, api_key))
    url = f"/v1/jobs/{job.id}/events"
    listening = asyncio.create_task(client.get(url, headers={"last-event-id": str(2**63 - 1)}))
    assert (await client.post(f"/v1/jobs/{job.id}/cancel")).status_code == 200
    answer = await asyncio.wait_for(listening, 10)
    # Connected before the cancel: the cancel is what came next; after it: nothing left, 204.
    if answer.status_code == 200:
        assert [json.loads(e.data)["status"] for e in _parsed(answer)[0]] == ["cancelled"]
    else:
        assert answer.status_code == 204


@pytest.mark.parametrize("value", [str(2**63), "99999999999999999999999", "-1", "1.5", "abc"])
async def test_a_bad_last_event_id_is_400_before_any_stream(
    client: httpx.AsyncClient, db: Database, api_key: str, value: str
) -> None:
    job = await jobs.enqueue(db, "slow", account_id=await _account(db, api_key))
    refused = await client.get(f"/v1/jobs/{job.id}/events", headers={"last-event-id": value})
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/problems/bad-request")
    assert refused.json()["header"] == "Last-Event-ID"
    await jobs.cancel(db, job.id, account_id=job.account_id)
