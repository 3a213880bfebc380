"""`update()` and `wait()` written once, as generators that yield what to do (sans-I/O style).

A flow yields a step and is sent back its result: an `httpx.Request` gets its read
`httpx.Response`, a `Sleep` gets None, a `Watch` gets a `Watched`. `Client` and `AsyncClient`
each run flows with a few lines of sync or async I/O, so the logic is not written twice.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from ustun.errors import ApiError, UpdateConflict, WaitTimeout
from ustun.http.merge_diff import MEDIA_TYPE as MERGE_PATCH
from ustun.http.merge_diff import merge_diff
from ustun.http.problem import parse_problem
from ustun.http.retry_after import parse_retry_after
from ustun.http.sse_parser import MEDIA_TYPE as EVENT_STREAM
from ustun.http.sse_parser import Event

T = TypeVar("T")

UPDATE_ATTEMPTS = 10
"""Read-change-write rounds before `update()` gives up; n concurrent writers need at most n."""
WAIT_TIMEOUT = 300.0
"""Seconds `wait()` follows a job before raising `WaitTimeout`."""
POLL_INTERVAL = 1.0
"""Seconds between polls when the server sends no `Retry-After`."""
POLL_CAP = 30.0
"""Seconds: the longest `Retry-After` obeyed between polls."""
STREAM_IDLE = 30.0
"""Seconds of silence after which an event stream is reopened (servers keep-alive more often)."""
FINAL_STATUSES = frozenset({"done", "failed", "cancelled"})
"""A job in one of these states will not change again."""

Build = Callable[..., httpx.Request]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Step: pause for `seconds`."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Watched:
    """What a `Watch` saw: an event stream or not, the job's end or not, where to resume."""

    offered: bool
    finished: bool
    last_event_id: str


@dataclass(frozen=True, slots=True)
class Watch:
    """Step: open `request` as an event stream and read it until the job ends or `deadline`."""

    request: httpx.Request
    deadline: float
    clock: Callable[[], float] = time.monotonic

    def offered(self, response: httpx.Response) -> bool:
        """The server answered with an event stream (not 404 or plain JSON)."""
        media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        return response.status_code == 200 and media == EVENT_STREAM

    def over(self, events: list[Event]) -> bool:
        """One of `events` says the job is finished."""
        return any(_final_event(event) for event in events)

    def expired(self) -> bool:
        """The caller's deadline has passed."""
        return self.clock() >= self.deadline


Flow = Generator["httpx.Request | Sleep | Watch", Any, T]


def update_flow(
    build: Build,
    url: str,
    change: Callable[[Any], Any],
    *,
    attempts: int,
    method: str,
) -> Flow[Any]:
    """GET, apply `change`, write back with `If-Match`; on 412 start again (RFC 9110 §13.1.1)."""
    if method not in ("PUT", "PATCH"):
        raise ValueError("method must be PUT (whole representation) or PATCH (JSON merge patch)")
    lost: httpx.Response | None = None
    for _ in range(attempts):
        current: httpx.Response = yield build("GET", url)
        if current.status_code != 200:
            raise api_error(current, f"GET {url} failed")
        etag = current.headers.get("etag")
        if etag is None:
            raise ApiError(f"GET {url} sent no ETag: it cannot be updated safely", response=current)
        before = current.json()
        after = change(copy.deepcopy(before))
        if method == "PUT":
            write = build("PUT", url, json=after, headers={"If-Match": etag})
        else:
            body = json.dumps(merge_diff(before, after)).encode()
            headers = {"If-Match": etag, "Content-Type": MERGE_PATCH}
            write = build("PATCH", url, content=body, headers=headers)
        written: httpx.Response = yield write
        if written.status_code != 412:
            if written.is_success:
                return written.json() if written.content else after
            raise api_error(written, f"{method} {url} failed")
        lost = written
    assert lost is not None
    problem = parse_problem(lost.headers.get("content-type"), lost.content)
    raise UpdateConflict(
        f"{method} {url}: precondition failed on all {attempts} attempts",
        problem=problem,
        response=lost,
    )


def job_url(target: str | httpx.URL | httpx.Response) -> str:
    """The job to follow: a URL, or the `Location` of a 202 Accepted (RFC 9110 §15.3.3)."""
    if not isinstance(target, httpx.Response):
        return str(target)
    if target.is_error:
        raise api_error(target, f"{target.request.method} {target.request.url} failed")
    location = target.headers.get("location")
    if location is None:
        raise ValueError(f"a {target.status_code} response without Location names no job")
    return str(target.url.join(location))


def wait_flow(
    build: Build,
    target: str | httpx.URL | httpx.Response,
    *,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> Flow[Any]:
    """Follow a job until it is done, failed or cancelled; return its final representation.

    Listens to `{job}/events` (SSE) when the server offers it, resuming with `Last-Event-ID`;
    otherwise polls the job with `If-None-Match`, pausing as its `Retry-After` asks.
    """
    url = job_url(target)
    deadline = clock() + timeout
    listen, last_event_id, etag = True, "", ""
    job: Any = None
    while True:
        if listen:
            headers = {"Accept": EVENT_STREAM}
            if last_event_id:
                headers["Last-Event-ID"] = last_event_id
            # Silence longer than this (or than the time left) ends the stream; the job is
            # then re-read and the stream reopened from the last event.
            quiet = httpx.Timeout(max(0.05, min(STREAM_IDLE, deadline - clock())))
            events = build("GET", f"{url.rstrip('/')}/events", headers=headers, timeout=quiet)
            watched: Watched = yield Watch(events, deadline, clock)
            listen, last_event_id = watched.offered, watched.last_event_id
        polled: httpx.Response = yield build(
            "GET", url, headers={"If-None-Match": etag} if etag else {}
        )
        if polled.status_code == 200:
            job, etag = polled.json(), polled.headers.get("etag", "")
        elif polled.status_code != 304:
            raise api_error(polled, f"GET {url} failed")
        if isinstance(job, dict) and job.get("status") in FINAL_STATUSES:
            return job
        remaining = deadline - clock()
        if remaining <= 0:
            raise WaitTimeout(f"job {url} still running after {timeout} s", job=job)
        pause = parse_retry_after(polled.headers.get("retry-after"))
        interval = POLL_INTERVAL if pause is None else min(pause, POLL_CAP)
        yield Sleep(min(interval, remaining))


def _final_event(event: Event) -> bool:
    """An SSE event that announces the end: its type or its JSON `status` is a final state."""
    if event.event.rsplit(".", 1)[-1] in FINAL_STATUSES:
        return True
    try:
        data = json.loads(event.data)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("status") in FINAL_STATUSES


def api_error(response: httpx.Response, message: str) -> ApiError:
    """The error for an error `response`, its problem details parsed: `message (status): detail`."""
    problem = parse_problem(response.headers.get("content-type"), response.content)
    detail = f": {problem.detail}" if problem and problem.detail else ""
    return ApiError(
        f"{message} ({response.status_code}){detail}", problem=problem, response=response
    )
