"""`wait()`: follow a 202 job to its end by SSE or by polling — against a local jobs API."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from local_servers import ThreadedServer
from ustun.client import ApiError, AsyncClient, Client, WaitTimeout


class Jobs:
    """One job that finishes after `polls_to_finish` polls, or when its event stream says so."""

    def __init__(
        self,
        *,
        sse: bool,
        polls_to_finish: int = 3,
        drop_stream_once: bool = False,
        silent: bool = False,
        retry_after: str = "0",
    ) -> None:
        self.sse = sse
        self.silent = silent
        self.polls_to_finish = polls_to_finish
        self.drop_stream_once = drop_stream_once
        self.retry_after = retry_after
        self.job = {"id": "job_1", "status": "pending", "progress": 0}
        self.polls: list[int] = []  # status codes of GET /jobs/job_1
        self.last_event_ids: list[str | None] = []

    async def create(self, request: Request) -> Response:
        return JSONResponse(self.job, 202, headers={"Location": "/v1/jobs/job_1"})

    async def get(self, request: Request) -> Response:
        if not self.sse and len(self.polls) + 1 >= self.polls_to_finish:
            self.job = {**self.job, "status": "done", "progress": 100}
        etag = f'"{self.job["status"]}"'
        headers = {"ETag": etag}
        if self.job["status"] != "done":
            headers["Retry-After"] = self.retry_after
        if request.headers.get("if-none-match") == etag:
            self.polls.append(304)
            return Response(status_code=304, headers=headers)
        self.polls.append(200)
        return JSONResponse(self.job, headers=headers)

    async def events(self, request: Request) -> Response:
        if not self.sse:
            body = {"type": "/problems/not-found", "title": "Not found", "status": 404}
            return JSONResponse(body, 404, media_type="application/problem+json")
        self.last_event_ids.append(request.headers.get("last-event-id"))

        async def stream() -> AsyncIterator[bytes]:
            yield b": hello\n\n"
            if self.silent:
                await asyncio.sleep(30)
            if not self.last_event_ids[-1]:
                self.job = {**self.job, "status": "processing", "progress": 50}
                yield b'id: 1\nevent: job.progress\ndata: {"status": "processing"}\n\n'
                if self.drop_stream_once:
                    return
            await asyncio.sleep(0.05)
            self.job = {**self.job, "status": "done", "progress": 100}
            yield b"id: 2\nevent: job.done\ndata: " + json.dumps(self.job).encode() + b"\n\n"
            await asyncio.sleep(30)  # a server may keep the stream open: the client must not

        return StreamingResponse(stream(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[list[Jobs], str]]:
    current = [Jobs(sse=False)]

    async def create(request: Request) -> Response:
        return await current[0].create(request)

    async def get(request: Request) -> Response:
        return await current[0].get(request)

    async def events(request: Request) -> Response:
        return await current[0].events(request)

    app = Starlette(
        routes=[
            Route("/v1/reports", create, methods=["POST"]),
            Route("/v1/jobs/job_1", get),
            Route("/v1/jobs/job_1/events", events),
        ]
    )
    with ThreadedServer(app) as running:
        yield current, running.base_url


Wait = Callable[..., Awaitable[Any]]


@pytest.fixture(params=["sync", "async"])
def wait(request: pytest.FixtureRequest, server: tuple[list[Jobs], str]) -> Wait:
    """`await wait(jobs, target=None, **options)`: install `jobs`, POST a report, follow it."""
    current, base_url = server

    async def wait(jobs: Jobs, target: str | None = None, **options: Any) -> Any:
        current[0] = jobs
        if request.param == "sync":
            with Client(base_url=base_url) as client:
                return client.wait(target or client.post("/v1/reports", json={}), **options)
        async with AsyncClient(base_url=base_url) as client:
            accepted: str | httpx.Response = target or await client.post("/v1/reports", json={})
            return await client.wait(accepted, **options)

    return wait


async def test_polling_follows_the_job_with_etags(wait: Wait) -> None:
    jobs = Jobs(sse=False, polls_to_finish=3)
    job = await wait(jobs)
    assert job == {"id": "job_1", "status": "done", "progress": 100}
    assert jobs.polls == [200, 304, 200]


async def test_sse_follows_the_job_without_polling(wait: Wait) -> None:
    jobs = Jobs(sse=True)
    job = await wait(jobs, "/v1/jobs/job_1")
    assert job["status"] == "done"
    assert jobs.polls == [200], "one read of the final job, no polling"
    assert jobs.last_event_ids == [None]


async def test_a_dropped_stream_resumes_from_the_last_event(wait: Wait) -> None:
    jobs = Jobs(sse=True, drop_stream_once=True)
    assert (await wait(jobs))["status"] == "done"
    assert jobs.last_event_ids == [None, "1"]


async def test_a_job_that_does_not_finish_in_time_raises(wait: Wait) -> None:
    jobs = Jobs(sse=False, polls_to_finish=10**6)
    with pytest.raises(WaitTimeout) as raised:
        await wait(jobs, timeout=0.3)
    assert raised.value.job["status"] == "pending"


@pytest.mark.parametrize("retry_after", ["9" * 400, "9" * 5000])
async def test_a_hostile_retry_after_pauses_no_longer_than_the_timeout(
    wait: Wait, retry_after: str
) -> None:
    """A job's `Retry-After` too long for a float is a long pause, cut short by the timeout."""
    jobs = Jobs(sse=False, polls_to_finish=10**6, retry_after=retry_after)
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        await wait(jobs, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3


async def test_a_silent_stream_does_not_outlast_the_timeout(wait: Wait) -> None:
    jobs = Jobs(sse=True, silent=True)
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        await wait(jobs, timeout=0.5)
    assert time.monotonic() - started < 3, "not held by the default 5 s read timeout"


def test_a_refused_request_is_not_waited_on() -> None:
    refused = httpx.Response(
        422,
        json={"type": "/problems/validation-error", "title": "Validation error", "status": 422},
        headers={"content-type": "application/problem+json"},
        request=httpx.Request("POST", "http://api.example/v1/reports"),
    )
    with Client() as client, pytest.raises(ApiError) as raised:
        client.wait(refused)
    assert raised.value.type == "/problems/validation-error"
