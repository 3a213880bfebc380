"""`USTUN_MAX_BODY`: one limit on every request body, 413 `payload-too-large` above it, with
nothing read past the limit and nothing written."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from local_servers import ThreadedServer
from support import problem_of
from ustun.defaults import DEFAULT_MAX_BODY
from ustun.service import create_app
from ustun.settings import Settings

LIMIT = 4_096
CHUNK = 512
PAYMENT = {"amount": 5, "currency": "EUR"}


@pytest.fixture
def settings(database_url: str) -> Settings:
    """The app under test takes at most LIMIT bytes of body."""
    return Settings(database_url=database_url, max_body=LIMIT)


def document(size: int) -> bytes:
    """A valid document body of exactly `size` bytes of JSON."""
    empty = json.dumps({"title": "t", "body": ""}).encode()
    return json.dumps({"title": "t", "body": "x" * (size - len(empty))}).encode()


def test_the_default_limit_is_one_mebibyte_and_the_environment_sets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("USTUN_MAX_BODY", raising=False)
    assert DEFAULT_MAX_BODY == Settings().max_body == 1_048_576
    monkeypatch.setenv("USTUN_MAX_BODY", "2048")
    assert Settings().max_body == 2048


async def test_a_body_of_exactly_the_limit_is_accepted(client: httpx.AsyncClient) -> None:
    body = document(LIMIT)
    assert len(body) == LIMIT
    made = await client.post(
        "/v1/documents", content=body, headers={"content-type": "application/json"}
    )
    assert made.status_code == 201, made.text
    assert len(made.json()["body"]) > LIMIT - 30


async def test_a_declared_length_over_the_limit_is_413_and_claims_no_key(
    client: httpx.AsyncClient,
) -> None:
    key = {"idempotency-key": uuid.uuid4().hex, "content-type": "application/json"}
    big = json.dumps({**PAYMENT, "description": "x" * LIMIT}).encode()
    refused = await client.post("/v1/payments", content=big, headers=key)
    problem = problem_of(refused, 413, "payload-too-large")
    assert problem["detail"] == (
        f"The request body is larger than {LIMIT} bytes, the most this server accepts."
    )
    assert refused.headers["x-request-id"] in problem["instance"]
    assert (await client.get("/v1/payments")).json()["data"] == []
    # No idempotency claim was taken: the same key now runs a valid request.
    made = await client.post("/v1/payments", content=json.dumps(PAYMENT).encode(), headers=key)
    assert made.status_code == 201, made.text


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("PUT", "/v1/documents/mine", {"if-none-match": "*"}),
        ("POST", "/v1/payments", {"idempotency-key": "chunked"}),
        ("POST", "/v1/ledger-accounts", {}),
    ],
)
async def test_a_chunked_body_is_cut_at_the_limit_and_nothing_is_written(
    client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]
) -> None:
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for offset in range(0, 40 * CHUNK, CHUNK):
            sent.append(offset)
            yield b" " * CHUNK

    refused = await client.request(
        method, path, content=chunks(), headers={"content-type": "application/json", **headers}
    )
    assert "content-length" not in refused.request.headers
    problem_of(refused, 413, "payload-too-large")
    # Reading stopped at the chunk that crossed the limit; the rest was never asked for.
    assert len(sent) == LIMIT // CHUNK + 1
    assert (await client.get("/v1/documents/mine")).status_code == 404
    assert (await client.get("/v1/payments")).json()["data"] == []


def test_over_real_http_a_declared_length_is_refused_before_the_body_is_sent(
    settings: Settings, api_key: str
) -> None:
    """The client announces 10 MiB and sends none of it: the answer comes anyway, at once."""
    with ThreadedServer(create_app(settings)) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.putrequest("POST", "/v1/documents")
        for name, value in (
            ("authorization", f"Bearer {api_key}"),
            ("content-type", "application/json"),
            ("content-length", str(10 * 1024 * 1024)),
        ):
            conn.putheader(name, value)
        conn.endheaders()
        answer = conn.getresponse()
        assert answer.status == 413
        assert answer.getheader("content-type") == "application/problem+json"
        assert json.loads(answer.read())["type"].endswith("/problems/payload-too-large")
        conn.close()


def test_over_real_http_deep_nesting_is_400_and_the_connection_lives_on(
    settings: Settings, api_key: str
) -> None:
    """It used to be a 500 that dropped the connection, resetting the client's next request."""
    auth = {"authorization": f"Bearer {api_key}"}
    with ThreadedServer(create_app(settings)) as server:
        made = httpx.post(f"{server.base_url}/v1/documents", json={"title": "t"}, headers=auth)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        deep = b"[" * 2_000 + b"]" * 2_000
        headers = {
            **auth,
            "content-type": "application/merge-patch+json",
            "if-match": made.headers["etag"],
        }
        conn.request("PATCH", made.headers["location"], body=deep, headers=headers)
        answer = conn.getresponse()
        assert answer.status == 400
        assert "nested too deeply" in json.loads(answer.read())["detail"]
        socket = conn.sock
        conn.request("GET", made.headers["location"], headers=auth)
        again = conn.getresponse()
        assert again.status == 200
        assert json.loads(again.read())["version"] == 1
        assert conn.sock is socket
        conn.close()
