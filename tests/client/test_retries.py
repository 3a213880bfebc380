"""The retry policy of `Client` and `AsyncClient`, against a real local HTTP server."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from local_servers import CuttingProxy, Reply, Script, problem
from support import free_port
from ustun.client import AsyncClient, Backoff, Client, RetriesExhausted

FAST = Backoff(base=0.01, cap=0.05)
KEY = re.compile(r'"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"')

Call = Callable[..., Awaitable[httpx.Response]]


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest, base_url: str) -> Call:
    """`await call(method, path, client={...options}, **request options)` with either client."""

    async def call(
        method: str, path: str, *, client: dict[str, Any] | None = None, **options: Any
    ) -> httpx.Response:
        settings = {"base_url": base_url, "retry": FAST, **(client or {})}
        if request.param == "sync":
            with Client(**settings) as sync:
                return sync.request(method, path, **options)
        async with AsyncClient(**settings) as client_:
            return await client_.request(method, path, **options)

    return call


async def test_503_then_201_succeeds_with_the_same_key(call: Call, script: Script) -> None:
    script.then(Reply(503), Reply(201, {"id": "pay_1"}))
    response = await call("POST", "/v1/payments", json={"amount": 1})
    assert response.status_code == 201
    assert response.json() == {"id": "pay_1"}
    keys = [seen.headers["idempotency-key"] for seen in script.seen]
    assert len(keys) == 2
    assert keys[0] == keys[1]
    assert KEY.fullmatch(keys[0])
    assert script.seen[0].body == script.seen[1].body == b'{"amount":1}'


async def test_429_retry_after_one_waits_at_least_a_second(call: Call, script: Script) -> None:
    script.then(Reply(429, headers={"Retry-After": "1"}))
    started = time.monotonic()
    assert (await call("GET", "/v1/payments")).status_code == 200
    assert time.monotonic() - started >= 1.0
    assert script.seen[1].at - script.seen[0].at >= 1.0


async def test_retry_after_is_capped(call: Call, script: Script) -> None:
    script.then(Reply(503, headers={"Retry-After": "3600"}))
    capped = Backoff(base=0.01, retry_after_cap=0.2)
    started = time.monotonic()
    assert (await call("GET", "/x", client={"retry": capped})).status_code == 200
    assert 0.2 <= time.monotonic() - started < 2


@pytest.mark.parametrize("value", ["9" * 400, "9" * 5000, "Mon, 01 Jun 2026 12:00:" + "9" * 400])
async def test_a_hostile_retry_after_is_a_long_wait_capped(
    call: Call, script: Script, value: str
) -> None:
    """A `Retry-After` too long for a float (or for `int()`) is the longest wait the policy
    obeys, or no wait asked for at all: never a raw OverflowError or ValueError."""
    script.then(
        Reply(429, headers={"Retry-After": value}), Reply(503, headers={"Retry-After": value})
    )
    capped = Backoff(base=0.01, cap=0.05, retry_after_cap=0.05)
    assert (await call("GET", "/x", client={"retry": capped})).status_code == 200
    assert len(script.seen) == 3


async def test_a_keyless_post_is_never_retried(call: Call, script: Script) -> None:
    script.then(Reply(503), Reply(201))
    response = await call("POST", "/v1/payments", json={}, client={"idempotency_keys": False})
    assert response.status_code == 503
    assert len(script.seen) == 1
    assert "idempotency-key" not in script.seen[0].headers


async def test_the_callers_key_is_kept(call: Call, script: Script) -> None:
    script.then(Reply(502))
    response = await call("PATCH", "/x", json={}, headers={"Idempotency-Key": "mine"})
    assert response.status_code == 200
    assert [s.headers["idempotency-key"] for s in script.seen] == ["mine", "mine"]


def test_a_stream_body_is_never_retried(script: Script, base_url: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"a"
        yield b"b"

    script.then(Reply(503), Reply(201))
    with Client(base_url=base_url, retry=FAST) as client:
        assert client.put("/upload", content=chunks()).status_code == 503
    assert len(script.seen) == 1
    assert script.seen[0].body == b"ab"


async def test_an_async_stream_body_is_never_retried(script: Script, base_url: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    script.then(Reply(503), Reply(201))
    async with AsyncClient(base_url=base_url, retry=FAST) as client:
        assert (await client.post("/upload", content=chunks())).status_code == 503
    assert len(script.seen) == 1
    assert "idempotency-key" in script.seen[0].headers, "keyed, and still not replayable"


async def test_409_in_progress_is_retried_but_a_conflict_is_not(call: Call, script: Script) -> None:
    script.then(problem(409, "idempotency-in-progress", **{"Retry-After": "0"}), Reply(201))
    assert (await call("POST", "/v1/payments", json={})).status_code == 201
    assert len(script.seen) == 2

    script.then(problem(409, "state-conflict"))
    response = await call("POST", "/v1/payments", json={})
    assert response.status_code == 409
    assert len(script.seen) == 3


@pytest.mark.parametrize("status", [404, 412, 422])
async def test_other_errors_are_returned_as_httpx_does(
    call: Call, script: Script, status: int
) -> None:
    script.then(problem(status, "nope"))
    assert (await call("GET", "/x")).status_code == status
    assert len(script.seen) == 1


async def test_no_retry_policy_means_one_attempt(call: Call, script: Script) -> None:
    script.then(Reply(503))
    assert (await call("GET", "/x", client={"retry": None})).status_code == 503
    assert len(script.seen) == 1


async def test_giving_up_raises_with_the_last_problem(call: Call, script: Script) -> None:
    script.then(*[problem(503, "not-ready")] * 3)
    with pytest.raises(RetriesExhausted) as raised:
        await call("DELETE", "/x", client={"retry": Backoff(attempts=3, base=0.01)})
    error = raised.value
    assert error.attempts == 3
    assert (error.type, error.title, error.status, error.detail) == (
        "/problems/not-ready",
        "not-ready",
        503,
        "not-ready!",
    )
    assert error.response.status_code == 503
    assert len(script.seen) == 3


async def test_the_deadline_stops_retries_without_sleeping_past_it(
    call: Call, script: Script
) -> None:
    script.then(Reply(429, headers={"Retry-After": "5"}))
    started = time.monotonic()
    with pytest.raises(RetriesExhausted):
        await call("GET", "/x", client={"retry": Backoff(deadline=1.0)})
    assert time.monotonic() - started < 1.0
    assert len(script.seen) == 1


async def test_network_errors_raise_with_the_cause(call: Call) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RetriesExhausted) as raised:
        await call("GET", f"{nowhere}/x", client={"retry": Backoff(attempts=2, base=0.01)})
    assert isinstance(raised.value.error, httpx.ConnectError)
    assert raised.value.__cause__ is raised.value.error
    assert raised.value.problem is None


async def test_a_keyless_post_keeps_the_httpx_error(call: Call) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(httpx.ConnectError):
        await call("POST", f"{nowhere}/x", client={"idempotency_keys": False})


async def test_a_dropped_connection_is_retried_with_the_same_key(
    call: Call, script: Script, base_url: str
) -> None:
    port = int(base_url.rsplit(":", 1)[1])
    with CuttingProxy(port, cuts=1) as proxy:
        response = await call("POST", f"{proxy.base_url}/v1/payments", json={"amount": 5})
    assert response.status_code == 200
    assert proxy.cut == 1
    assert len(script.seen) == 2, "the server saw the request, the client never saw the answer"
    assert script.seen[0].headers["idempotency-key"] == script.seen[1].headers["idempotency-key"]


def test_every_entry_point_is_covered(script: Script, base_url: str) -> None:
    with Client(base_url=base_url, retry=FAST) as client:
        script.then(Reply(503))
        with client.stream("GET", "/streamed") as streamed:
            assert streamed.status_code == 200
            assert streamed.read() == b'{"ok": true}'
        script.then(Reply(503))
        assert client.send(client.build_request("GET", "/sent")).status_code == 200
        script.then(Reply(503))
        assert client.get("/got").status_code == 200
    assert [s.path for s in script.seen] == ["/streamed"] * 2 + ["/sent"] * 2 + ["/got"] * 2


def test_api_key_is_a_bearer_token(script: Script, base_url: str) -> None:
    with Client(base_url=base_url, api_key="sk_1", headers={"X-Trace": "t"}) as client:
        client.get("/")
    with Client(base_url=base_url) as anonymous:
        anonymous.get("/")
    assert script.seen[0].headers["authorization"] == "Bearer sk_1"
    assert script.seen[0].headers["x-trace"] == "t"
    assert "authorization" not in script.seen[1].headers


def test_every_retry_is_logged_with_reason_and_wait(
    script: Script, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    script.then(Reply(429, headers={"Retry-After": "0"}))
    with caplog.at_level(logging.DEBUG, logger="ustun.client"), Client(base_url=base_url) as c:
        c.get("/x")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "ustun.client"]
    expected = r"retrying GET http://127\.0\.0\.1:\d+/x in 0\.00 s \(attempt 2 of 5\): 429"
    assert re.fullmatch(expected, line)
