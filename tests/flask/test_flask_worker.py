"""What `flask --app shop ustun worker` does for the example Flask shop on both databases: the
event of a committed payment delivered to an endpoint registered by `endpoints.create` in an
`@idempotent` view (its secret shown once, sealed for the replay), verified with the
`standardwebhooks` package, and none from a view that raised; a job enqueued by a view run to
its end (202, its status with ETag/304, another account's a 404), its result served beside
its status, and its events streamed (SSE) as it runs, resumed after `Last-Event-ID`, until its
end or the stream's lifetime."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from example_shops import BIN, Served, stream_events, stream_ids
from flask_support import Shop, payment_events
from support import problem_of, wait_for
from ustun.jobs.adapters.plans import EVENTS_PAGE
from ustun.service.plumbing.job_representation import STREAM_LIFETIME

pytestmark = pytest.mark.e2e


@dataclass
class Receiver:
    """A webhook endpoint on a local port: records each request's headers and body, answers
    204."""

    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                received.append((dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    """A receiver and its URL, served in a thread for the test."""
    found = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), found.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield found, f"http://127.0.0.1:{server.server_address[1]}/hooks"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module", autouse=True)
def worker(shop: Shop) -> None:
    """The shop's worker, beside its server."""
    shop.start(str(BIN / "flask"), "--app", "shop", "ustun", "worker", log="worker.log")


def test_a_committed_payment_is_delivered_signed_and_a_raised_one_never(
    shop: Shop, served: Served, receiver: tuple[Receiver, str]
) -> None:
    endpoint, url = receiver
    key = str(uuid.uuid4())
    with served.client("bob") as bob:
        register = {"url": url, "events": ["payment.*"]}
        created = bob.post("/webhook-endpoints", json=register, headers={"Idempotency-Key": key})
        assert created.status_code == 201, created.text
        secret = created.json()["secret"]
        assert secret.startswith("whsec_")
        # The answer is kept sealed (no-store) and replayed whole, for its own key only.
        again = bob.post("/webhook-endpoints", json=register, headers={"Idempotency-Key": key})
        assert (again.headers["idempotent-replayed"], again.json()) == ("true", created.json())
        refused = bob.post(
            "/webhook-endpoints",
            json={"url": "ftp://example.com/hooks"},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["type"] == "/problems/validation-error"

        payment = {"amount": 8008, "currency": "EUR"}
        failed = bob.post("/faults/raise", json=payment, headers={"Idempotency-Key": "f-1"})
        assert failed.status_code == 500
        paid = bob.post("/payments", json=payment, headers={"Idempotency-Key": "p-1"})
        assert paid.status_code == 201, paid.text

    [(headers, body)] = wait_for(
        lambda: endpoint.received, timeout=30, what="the event at the endpoint:\n" + shop.logs()
    )
    event = Webhook(secret).verify(body, headers)
    assert (event["type"], event["data"]) == ("payment.created", paid.json())
    # The raised view's event never committed: this payment's is the one event.
    assert payment_events(shop, 8008) == [event["id"]]


def test_a_job_is_accepted_run_and_its_result_served(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        payment = {"amount": 9009, "currency": "EUR"}
        paid = ann.post("/payments", json=payment, headers={"Idempotency-Key": str(uuid.uuid4())})
        started = ann.post(
            f"/payments/{paid.json()['id']}/receipts",
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert started.status_code == 202, started.text
        job = started.json()
        assert (job["kind"], job["status"]) == ("shop.receipt", "pending")
        assert started.headers["retry-after"] == "1"
        location = started.headers["location"]
        assert location.endswith(f"/ustun/jobs/{job['id']}")

        def done() -> httpx.Response | None:
            status = ann.get(location)
            return status if status.json()["status"] in ("done", "failed") else None

        finished = wait_for(done, timeout=30, interval=0.2, what="the job to finish")
        assert finished.json()["status"] == "done", finished.text
        assert "retry-after" not in finished.headers
        unchanged = ann.get(location, headers={"If-None-Match": finished.headers["etag"]})
        assert unchanged.status_code == 304
        result = ann.get(finished.json()["result_url"])
        assert result.status_code == 200
        assert result.headers["content-type"].startswith("text/plain")
        assert result.text == f"Receipt for payment {paid.json()['id']}\n"
        # Another account's job does not exist for bob.
        assert bob.get(location).json()["type"] == "/problems/not-found"


def test_an_account_registers_at_most_its_quota_of_endpoints(
    served: Served, receiver: tuple[Receiver, str]
) -> None:
    _, url = receiver
    with served.client("ann") as ann:

        def register() -> httpx.Response:
            key = {"Idempotency-Key": str(uuid.uuid4())}
            return ann.post("/webhook-endpoints", json={"url": url}, headers=key)

        assert [register().status_code for _ in range(3)] == [201, 201, 201]
        refused = register()
        assert refused.status_code == 429, refused.text
        assert refused.json()["type"] == "/problems/quota-exceeded"


def _waiting_job(client: httpx.Client, release: str) -> httpx.Response:
    """The 202 of a `shop.wait` job (faults.py): half done at once, done once `release` is."""
    key = {"Idempotency-Key": str(uuid.uuid4())}
    started = client.post("/faults/job", json={"release": release}, headers=key)
    assert started.status_code == 202, started.text
    return started


def _half_done(client: httpx.Client, url: str) -> httpx.Response:
    """The job at `url` once it waits for its release (50 %)."""

    def half() -> httpx.Response | None:
        polled = client.get(url)
        assert polled.status_code == 200, polled.text
        return polled if polled.json()["progress"] == 50 else None

    return wait_for(half, timeout=30, interval=0.1, what="the job to be half done")


def test_a_job_is_followed_live_over_sse_and_resumed_after_last_event_id(
    shop: Shop, served: Served
) -> None:
    release = f"release-{uuid.uuid4()}"
    with served.client("ann") as ann:
        started = _waiting_job(ann, release)
        # `accepted`: the job's status resource, and the ETag of its first version.
        url = started.headers["location"].removeprefix(served.url)
        assert url == f"/ustun/jobs/{started.json()['id']}"
        assert started.headers["etag"] == '"1"'
        assert started.headers["retry-after"] == "1"
        waiting = _half_done(ann, url)
        etag = waiting.headers["etag"]
        assert waiting.headers["retry-after"] == "1"
        unchanged = ann.get(url, headers={"If-None-Match": etag})
        assert (unchanged.status_code, unchanged.content) == (304, b"")
        assert unchanged.headers["etag"] == etag
        assert ann.get(url, headers={"If-None-Match": '"1"'}).status_code == 200

        seen = int(etag.strip('"'))
        with ann.stream("GET", f"{url}/events") as response:
            events = stream_events(response)
            # Everything so far, while the job waits for its release: the stream is live.
            before = [next(events) for _ in range(seen)]
            (Path(shop.env["SHOP_FAULTS"]) / release).touch()
            after = list(events)
        assert [event_id for event_id, _, _ in before] == list(range(1, seen + 1))
        assert [data["status"] for _, _, data in before[:2]] == ["pending", "processing"]
        assert before[-1][2]["progress"] == 50
        final = seen + len(after)
        assert [event_id for event_id, _, _ in after] == list(range(seen + 1, final + 1))
        assert (after[-1][2]["status"], after[-1][2]["progress"]) == ("done", 100)

        done = ann.get(url, headers={"If-None-Match": etag})
        assert done.status_code == 200
        assert done.headers["etag"] == f'"{final}"'
        assert "retry-after" not in done.headers
        assert ann.get(url, headers={"If-None-Match": f'"{final}"'}).status_code == 304

        assert stream_ids(ann, url, 0) == list(range(1, final + 1))
        assert stream_ids(ann, url, 2) == list(range(3, final + 1))
        assert stream_ids(ann, url, final - 1) == [final]
        # The client saw the final event: 204 stops an EventSource from reconnecting.
        for last in (final, final + EVENTS_PAGE):
            over = ann.get(f"{url}/events", headers={"Last-Event-ID": str(last)})
            assert (over.status_code, over.content) == (204, b"")
        bad = ann.get(f"{url}/events", headers={"Last-Event-ID": "-1"})
        problem_of(bad, 400, "bad-request")


def test_another_accounts_job_events_are_not_found(served: Served) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        paid = ann.post(
            "/payments",
            json={"amount": 9010, "currency": "EUR"},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        started = ann.post(
            f"/payments/{paid.json()['id']}/receipts",
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        url = started.headers["location"]
        head = ann.head(f"{url}/events")
        assert head.status_code == 200
        assert head.headers["content-type"].startswith("text/event-stream")
        for path in (url, f"{url}/events", f"{url}/result"):
            problem_of(bob.get(path), 404, "not-found")
        problem_of(ann.get(f"{served.url}/ustun/jobs/job_nothing/events"), 404, "not-found")


def test_a_stream_ends_after_its_lifetime_and_the_client_resumes(
    shop: Shop, served: Served
) -> None:
    """A job that outlasts the stream: it ends after `STREAM_LIFETIME` without the final event,
    and the reconnection with `Last-Event-ID` gets the rest."""
    release = f"release-{uuid.uuid4()}"
    with served.client("ann") as ann:
        url = _waiting_job(ann, release).headers["location"]
        seen = int(_half_done(ann, url).headers["etag"].strip('"'))
        opened = time.monotonic()
        with ann.stream("GET", f"{url}/events") as response:
            first = [event_id for event_id, _, _ in stream_events(response)]
        lasted = time.monotonic() - opened
        assert first == list(range(1, seen + 1))
        assert STREAM_LIFETIME <= lasted < STREAM_LIFETIME + 5
        (Path(shop.env["SHOP_FAULTS"]) / release).touch()
        rest = stream_ids(ann, url, seen)
        assert rest == list(range(seen + 1, rest[-1] + 1))
        assert ann.get(url).json()["status"] == "done"
