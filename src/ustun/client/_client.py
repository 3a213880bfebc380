"""`Client` and `AsyncClient`: httpx clients whose every request follows ustun's retry policy.

Why override `send` rather than wrap the transport: every httpx entry point (`get`, `post`,
`request`, `stream`, `send`) ends in `send`, so the policy covers them all through public API
only; auth, redirects, event hooks and proxy mounts run again on each attempt as httpx means
them to; and the caller's own `transport=` (a `MockTransport`, an `ASGITransport`) keeps working
untouched. A transport wrapper would miss proxy mounts and run below auth and redirects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from ustun.client._flows import (
    UPDATE_ATTEMPTS,
    WAIT_TIMEOUT,
    Flow,
    Sleep,
    Watch,
    Watched,
    update_flow,
    wait_flow,
)
from ustun.client._retry import Attempts, add_idempotency_key, needs_body
from ustun.errors import ClientError
from ustun.http.backoff import Backoff
from ustun.http.sse_parser import EventStreamParser

T = TypeVar("T")
DEFAULT_BACKOFF = Backoff()


def _headers(api_key: str | None, headers: Any) -> httpx.Headers:
    merged = httpx.Headers(headers)
    if api_key is not None:
        merged["Authorization"] = f"Bearer {api_key}"
    return merged


class Client(httpx.Client):
    """A drop-in `httpx.Client` that is safe to use against a ustun API without configuration.

    - POST and PATCH carry an `Idempotency-Key` (a UUIDv4, kept on every retry) unless you set one;
    - network errors, 408, 409 idempotency-in-progress, 429, 500, 502, 503 and 504 are retried
      with full-jitter backoff (or `Retry-After`), but only for idempotent methods or keyed
      requests with a replayable body; when the retries run out, `RetriesExhausted` is raised;
    - everything else behaves exactly as `httpx.Client`.

    `retry=None` turns retrying off; `idempotency_keys=False` stops adding keys.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        retry: Backoff | None = DEFAULT_BACKOFF,
        idempotency_keys: bool = True,
        headers: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(headers=_headers(api_key, headers), **options)
        self.retry = retry
        self.idempotency_keys = idempotency_keys

    def send(self, request: httpx.Request, **options: Any) -> httpx.Response:
        """Send `request` under the retry policy (see the class); options as `httpx.Client.send`."""
        if self.idempotency_keys:
            add_idempotency_key(request)
        attempts = Attempts(request, self.retry)
        while True:
            response = None
            try:
                response = super().send(request, **options)
                if needs_body(response):
                    response.read()
            except httpx.TransportError as error:
                if response is not None:
                    response.close()
                wait = attempts.after_error(error)
                if wait is None:
                    raise
            else:
                wait = attempts.after_response(response)
                if wait is None:
                    return response
                response.close()
            time.sleep(wait)

    def update(
        self,
        url: str,
        change: Callable[[Any], Any],
        *,
        attempts: int = UPDATE_ATTEMPTS,
        method: str = "PUT",
    ) -> Any:
        """Read-modify-write `url` without losing anyone's update; return the stored result.

        GET, `change(current) -> new`, then PUT `new` (or, with `method="PATCH"`, a JSON merge
        patch from current to new) with `If-Match`; on 412 re-read and re-apply, up to
        `attempts` times, then raise `UpdateConflict`. `change` may run more than once.

        A PUT carries no Idempotency-Key: if its answer is lost and the retry meets 412 because
        the first try did land, `change` is applied again. PATCH carries a key, so its retry
        replays the first answer: prefer it for changes that must apply once (increments).
        """
        return self._run(
            update_flow(self.build_request, url, change, attempts=attempts, method=method)
        )

    def wait(self, job: str | httpx.URL | httpx.Response, *, timeout: float = WAIT_TIMEOUT) -> Any:
        """Follow a job (its URL, or the 202 that created it) to its end; return the final job.

        Uses the job's event stream (SSE) when the server offers one, else polls with
        `If-None-Match` and `Retry-After`. Raises `WaitTimeout` after `timeout` seconds.
        """
        return self._run(wait_flow(self.build_request, job, timeout=timeout))

    def _run(self, flow: Flow[T]) -> T:
        result: Any = None
        while True:
            try:
                step = flow.send(result)
            except StopIteration as done:
                value: T = done.value
                return value
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                result = None
            elif isinstance(step, Watch):
                result = self._watch(step)
            else:
                result = self.send(step)

    def _watch(self, step: Watch) -> Watched:
        try:
            response = self.send(step.request, stream=True)
        except (httpx.TransportError, ClientError):
            return Watched(offered=False, finished=False, last_event_id="")
        parser = EventStreamParser()
        try:
            if not step.offered(response):
                return Watched(offered=False, finished=False, last_event_id="")
            for chunk in response.iter_bytes():
                if step.over(parser.feed(chunk)):
                    return Watched(True, True, parser.last_event_id)
                if step.expired():
                    break
        except httpx.TransportError:
            pass  # the stream dropped: the flow re-reads the job and listens again
        finally:
            response.close()
        return Watched(True, False, parser.last_event_id)


class AsyncClient(httpx.AsyncClient):
    """A drop-in `httpx.AsyncClient` with the retry policy of `Client` (which see)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        retry: Backoff | None = DEFAULT_BACKOFF,
        idempotency_keys: bool = True,
        headers: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(headers=_headers(api_key, headers), **options)
        self.retry = retry
        self.idempotency_keys = idempotency_keys

    async def send(self, request: httpx.Request, **options: Any) -> httpx.Response:
        """Send `request` under the retry policy; options as `httpx.AsyncClient.send`."""
        if self.idempotency_keys:
            add_idempotency_key(request)
        attempts = Attempts(request, self.retry)
        while True:
            response = None
            try:
                response = await super().send(request, **options)
                if needs_body(response):
                    await response.aread()
            except httpx.TransportError as error:
                if response is not None:
                    await response.aclose()
                wait = attempts.after_error(error)
                if wait is None:
                    raise
            else:
                wait = attempts.after_response(response)
                if wait is None:
                    return response
                await response.aclose()
            await asyncio.sleep(wait)

    async def update(
        self,
        url: str,
        change: Callable[[Any], Any],
        *,
        attempts: int = UPDATE_ATTEMPTS,
        method: str = "PUT",
    ) -> Any:
        """Async `Client.update`: read-modify-write with `If-Match`, re-applied on 412."""
        flow = update_flow(self.build_request, url, change, attempts=attempts, method=method)
        return await self._run(flow)

    async def wait(
        self,
        job: str | httpx.URL | httpx.Response,
        *,
        timeout: float = WAIT_TIMEOUT,  # noqa: ASYNC109 - the job's deadline, as in Client.wait
    ) -> Any:
        """Async `Client.wait`: follow a job by SSE or polling; return the final job."""
        return await self._run(wait_flow(self.build_request, job, timeout=timeout))

    async def _run(self, flow: Flow[T]) -> T:
        result: Any = None
        while True:
            try:
                step = flow.send(result)
            except StopIteration as done:
                value: T = done.value
                return value
            perform: Awaitable[Any]
            if isinstance(step, Sleep):
                perform = asyncio.sleep(step.seconds)
            elif isinstance(step, Watch):
                perform = self._watch(step)
            else:
                perform = self.send(step)
            result = await perform

    async def _watch(self, step: Watch) -> Watched:
        try:
            response = await self.send(step.request, stream=True)
        except (httpx.TransportError, ClientError):
            return Watched(offered=False, finished=False, last_event_id="")
        parser = EventStreamParser()
        try:
            if not step.offered(response):
                return Watched(offered=False, finished=False, last_event_id="")
            async for chunk in response.aiter_bytes():
                if step.over(parser.feed(chunk)):
                    return Watched(True, True, parser.last_event_id)
                if step.expired():
                    break
        except httpx.TransportError:
            pass  # the stream dropped: the flow re-reads the job and listens again
        finally:
            await response.aclose()
        return Watched(True, False, parser.last_event_id)
