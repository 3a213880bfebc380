"""`ustun.client` against a real `ustun serve`, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from local_servers import CuttingProxy
from support import BACKENDS, Server, drop_pg_database, make_pg_database, wait_for
from ustun.client import AsyncClient, Client

pytestmark = pytest.mark.e2e
README = Path(__file__).parents[2] / "README.md"
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")


@pytest.fixture(scope="module", params=BACKENDS)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str]]:
    """One `ustun serve` (with its embedded worker) per backend, and its first API key."""
    tmp: Path = tmp_path_factory.mktemp(f"client-{request.param}")
    name, url = (None, f"sqlite:///{tmp / 'ustun.db'}")
    if request.param == "postgresql":
        name, url = make_pg_database()
    server = Server(url, tmp / "serve.log", USTUN_SECRET_KEY="k" * 40).start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        yield server, key
    finally:
        server.stop()
        if name is not None:
            drop_pg_database(name)


def test_a_cut_connection_is_retried_with_the_same_key_and_pays_once(
    service: tuple[Server, str],
) -> None:
    server, key = service
    marker = f"cut-{uuid.uuid4()}"
    payment = {"amount": 1250, "currency": "EUR", "description": marker}
    with (
        CuttingProxy(server.port, cuts=1) as proxy,
        Client(base_url=proxy.base_url, api_key=key) as api,
    ):
        created = api.post("/v1/payments", json=payment)
    assert created.status_code == 201, created.text
    assert proxy.cut == 1, "the first answer was lost on the way"
    assert created.headers["idempotent-replayed"] == "true", "the retry got the stored answer"

    with Client(base_url=server.base_url, api_key=key) as api:
        listed = api.get("/v1/payments", params={"limit": 100}).json()["data"]
    assert [p["id"] for p in listed if p["description"] == marker] == [created.json()["id"]]


def test_eight_concurrent_updaters_lose_no_update(service: tuple[Server, str]) -> None:
    server, key = service
    url = f"/v1/documents/doc-{uuid.uuid4().hex[:12]}"
    with Client(base_url=server.base_url, api_key=key) as api:
        made = api.put(url, json={"title": "0", "body": ""}, headers={"If-None-Match": "*"})
        assert made.status_code == 201, made.text

    def count(doc: dict[str, Any]) -> dict[str, Any]:
        return {"title": str(int(doc["title"]) + 1), "body": doc["body"] + "x"}

    def updater(_: int) -> Any:
        with Client(base_url=server.base_url, api_key=key) as api:
            return api.update(url, count, attempts=8)

    with ThreadPoolExecutor(8) as pool:
        written = list(pool.map(updater, range(8)))
    assert sorted(int(doc["title"]) for doc in written) == list(range(1, 9))
    with Client(base_url=server.base_url, api_key=key) as api:
        final = api.get(url).json()
    assert (final["title"], final["body"]) == ("8", "x" * 8)


async def test_merge_patch_updates_race_too(service: tuple[Server, str]) -> None:
    server, key = service
    async with AsyncClient(base_url=server.base_url, api_key=key) as api:
        made = await api.post("/v1/documents", json={"title": "0"})
        assert made.status_code == 201, made.text
        url = made.headers["location"]

        def count(doc: dict[str, Any]) -> dict[str, Any]:
            return {**doc, "title": str(int(doc["title"]) + 1)}

        for _ in range(4):
            await api.update(url, count, method="PATCH")
        assert (await api.get(url)).json()["title"] == "4"


class HideEvents(httpx.BaseTransport):
    """A server without SSE, as far as the client can tell: `/events` answers 404."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(404, request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("sse", [True, False], ids=["sse", "polling"])
def test_wait_returns_the_done_report_job(service: tuple[Server, str], sse: bool) -> None:
    server, key = service
    seen: list[tuple[str, int]] = []

    def record(response: httpx.Response) -> None:
        seen.append((response.request.url.path, response.status_code))

    options: dict[str, Any] = {"event_hooks": {"response": [record]}}
    if not sse:
        options["transport"] = HideEvents()
    with Client(base_url=server.base_url, api_key=key, **options) as api:
        accepted = api.post("/v1/reports", json={"period": "2026", "format": "json"})
        assert accepted.status_code == 202, accepted.text
        job = api.wait(accepted, timeout=60)
    assert job["status"] == "done", job
    assert job["result_url"]
    job_path = accepted.headers["location"]
    streams = [status for path, status in seen if path == f"{job_path}/events"]
    assert streams[0] == (200 if sse else 404)
    if sse:
        assert len([path for path, _ in seen if path == job_path]) == 1, "no polling needed"


def test_the_readme_example_runs(
    service: tuple[Server, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server, key = service
    section = README.read_text().split("## Calling a ustun API safely", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("KEY", key)
    code = compile(example.replace("http://127.0.0.1:8000", server.base_url), "README", "exec")
    exec(code, {})  # noqa: S102 - the README's own example, as a reader would run it
    payment_status, _, job_status = capsys.readouterr().out.split()
    assert (payment_status, job_status) == ("pending", "done")


def test_a_patch_whose_answer_is_lost_applies_once(service: tuple[Server, str]) -> None:
    server, key = service
    with Client(base_url=server.base_url, api_key=key) as api:
        made = api.post("/v1/documents", json={"title": "0"})
        assert made.status_code == 201, made.text
    url = made.headers["location"]

    def count(doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "title": str(int(doc["title"]) + 1)}

    with (
        CuttingProxy(server.port, cuts=1, method="PATCH") as proxy,
        Client(base_url=proxy.base_url, api_key=key) as api,
    ):
        updated = api.update(url, count, method="PATCH")
        assert proxy.cut == 1
        assert updated["title"] == "1", "the retried PATCH replayed the first answer"
        assert api.get(url).json()["title"] == "1"
