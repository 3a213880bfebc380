"""What `flask --app shop ustun worker` does for the example Flask shop on both databases: the
event of a committed payment delivered to an endpoint registered by `endpoints.create` in an
`@idempotent` view (its secret shown once, sealed for the replay), verified with the
`standardwebhooks` package, and none from a view that raised; a job enqueued by a view run to
its end (202, its status with ETag/304, another account's a 404), its result served beside
its status."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from example_shops import BIN, Served
from flask_support import Shop, payment_events
from support import wait_for

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
