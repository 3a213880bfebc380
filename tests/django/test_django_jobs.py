"""Async request-reply in the example shop, served by gunicorn (4 sync workers) on each database:
`POST /reports` answers 202 with its job, `include("ustun.django.urls")` serves the job (ETag,
304), its events (SSE, resumed after `Last-Event-ID`) and its result to its account only, and
`manage.py ustun_worker` runs it; a view that raises after enqueueing leaves no job."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from django_support import Shop
from example_shops import USERS, Served, stream_events, stream_ids
from support import problem_of, sync_connection
from ustun.client import Client
from ustun.jobs.adapters.plans import EVENTS_PAGE

pytestmark = pytest.mark.e2e

ROWS = 1_000  # the report's 4 chunks: 4 progress events between `processing` and `done`


@pytest.fixture(scope="module")
def served(shop: Shop) -> Served:
    return shop.serve(workers=4)


@pytest.fixture(scope="module")
def served_asgi(shop: Shop) -> Served:
    return shop.serve(workers=1, asgi=True)


@pytest.fixture(scope="module")
def start_worker(shop: Shop) -> Callable[[], None]:
    """Starts `manage.py ustun_worker` when first called: the module's first test follows a
    job from before any worker runs."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        if not started:
            started.append(
                shop.start(sys.executable, "manage.py", "ustun_worker", log="worker.log")
            )

    return start


def _report(client: httpx.Client, rows: Any = ROWS, path: str = "/reports") -> httpx.Response:
    return client.post(path, json={"rows": rows}, headers={"Idempotency-Key": str(uuid.uuid4())})


def _job_ids(shop: Shop) -> set[str]:
    """Every job in the shop's database."""
    with sync_connection(shop.database_url) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT id FROM jobs")
        return {job_id for (job_id,) in cursor.fetchall()}


def test_a_report_is_accepted_then_followed_live_to_its_result(
    served: Served, served_asgi: Served, start_worker: Callable[[], None]
) -> None:
    with served.client("ann") as ann, served_asgi.client("ann") as ann_asgi:
        accepted = _report(ann)
        assert accepted.status_code == 202, accepted.text
        url = accepted.headers["location"]
        assert url.startswith(served.url + "/ustun/jobs/job_")
        assert int(accepted.headers["retry-after"]) >= 1
        job = accepted.json()
        assert job["status"] == "pending"
        assert job["object"] == "job"
        assert job["kind"] == "shop.report"

        # No worker yet: the job stays pending, and its ETag stands.
        polled = ann.get(url)
        assert polled.status_code == 200, polled.text
        assert polled.json() == job
        etag = polled.headers["etag"]
        assert etag == accepted.headers["etag"] == '"1"'
        assert polled.headers["retry-after"] == "1"
        unchanged = ann.get(url, headers={"If-None-Match": etag})
        assert unchanged.status_code == 304
        assert unchanged.content == b""
        assert unchanged.headers["etag"] == etag
        problem_of(ann.get(f"{url}/result"), 404, "not-found")  # not done: no result yet

        # Followed under WSGI and ASGI: each stream's first event is read before any worker
        # runs, the rest as the worker runs the job.
        path = url.removeprefix(served.url)
        with (
            ann.stream("GET", f"{path}/events") as response,
            ann_asgi.stream("GET", f"{path}/events") as asgi_response,
        ):
            events, asgi_events = stream_events(response), stream_events(asgi_response)
            assert next(events)[:2] == next(asgi_events)[:2] == (1, "status")
            start_worker()
            rest, asgi_rest = list(events), list(asgi_events)
        assert asgi_rest == rest
        assert [event_id for event_id, _, _ in rest] == list(range(2, 2 + len(rest)))
        statuses = [data["status"] for _, _, data in rest]
        assert statuses[0] == "processing"
        assert statuses[-1] == "done"
        assert [data["progress"] for _, _, data in rest][1:] == [25, 50, 75, 100, 100]

        done = ann.get(url, headers={"If-None-Match": etag})
        assert done.status_code == 200
        assert done.headers["etag"] == f'"{rest[-1][0]}"'
        assert "retry-after" not in done.headers
        body = done.json()
        assert body["status"] == "done"
        assert body["progress"] == 100
        assert body["completed_at"] is not None
        assert ann.get(url, headers={"If-None-Match": done.headers["etag"]}).status_code == 304

        result = ann.get(body["result_url"])
        assert result.status_code == 200
        assert result.headers["content-type"] == "text/csv"
        lines = result.text.splitlines()
        assert lines[0] == "n,square"
        assert lines[-1] == f"{ROWS},{ROWS * ROWS}"
        assert len(lines) == ROWS + 1


def test_ustuns_client_follows_a_report_and_its_stream_resumes_after_last_event_id(
    served: Served, start_worker: Callable[[], None]
) -> None:
    start_worker()
    # ustun's own client keys the POST and follows the job's stream to its end.
    with Client(base_url=served.url, auth=("ann", USERS["ann"]), timeout=30) as client:
        accepted = client.post("/reports", json={"rows": ROWS})
        assert accepted.status_code == 202, accepted.text
        assert client.wait(accepted, timeout=30)["status"] == "done"
    url = accepted.headers["location"]
    with served.client("ann") as ann:
        done = ann.get(url)
        assert done.json()["status"] == "done"
        final = int(done.headers["etag"].strip('"'))
        assert stream_ids(ann, url, last=0) == list(range(1, final + 1))
        assert stream_ids(ann, url, last=3) == list(range(4, final + 1))
        assert stream_ids(ann, url, last=final - 1) == [final]
        # The client saw the final event: 204 stops an EventSource from reconnecting.
        for seen in (final, final + EVENTS_PAGE):
            over = ann.get(f"{url}/events", headers={"Last-Event-ID": str(seen)})
            assert over.status_code == 204
        problem_of(ann.get(f"{url}/events", headers={"Last-Event-ID": "-1"}), 400, "bad-request")


def test_another_accounts_job_is_not_found(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        url = _report(ann).headers["location"]
        assert ann.get(url).status_code == 200
        for path in (url, f"{url}/events", f"{url}/result"):
            problem_of(bob.get(path), 404, "not-found")
        problem_of(ann.get(f"{served.url}/ustun/jobs/job_nothing"), 404, "not-found")
        # The views authenticate as the app's DRF views do (its default permission classes).
        assert httpx.get(url).status_code == 401


def test_bad_input_is_refused_before_any_job(served: Served, shop: Shop) -> None:
    before = _job_ids(shop)
    with served.client("ann") as ann:
        for rows in (0, 10_001, "many"):
            assert _report(ann, rows).status_code == 400
        problem_of(ann.post("/reports", json={"rows": 5}), 400, "idempotency-key-missing")
    assert _job_ids(shop) == before


def test_a_view_that_raises_after_enqueueing_commits_no_job(served: Served, shop: Shop) -> None:
    before = _job_ids(shop)
    with served.client("ann") as ann:
        failed = _report(ann, 1, path="/faults/report")
        assert failed.status_code == 500
        assert _job_ids(shop) == before
        accepted = _report(ann, 1)
        assert accepted.status_code == 202
    assert _job_ids(shop) == before | {accepted.json()["id"]}
