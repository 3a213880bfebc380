"""What `litestar --app shop:app ustun worker` does for the example Litestar shop on each
database: the event of a committed payment delivered to an endpoint the shop registered
(`register_endpoint`, its secret shown once and sealed for the replay), verified with the
`standardwebhooks` package, and none from a handler that raised; a report job accepted (202),
followed over server-sent events to its end (resumed after `Last-Event-ID`, 204 once seen
whole), its status with ETag/304 and its result, none of it another account's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from standardwebhooks import Webhook

from example_shops import Served, stream_events, stream_ids
from flask_support import payment_events
from litestar_support import Shop
from support import problem_of, wait_for
from webhook_support import ThreadedReceiver

pytestmark = pytest.mark.e2e

ROWS = 1_000  # the report's 4 chunks: 4 progress events between `processing` and `done`


@pytest.fixture
def receiver() -> Iterator[ThreadedReceiver]:
    """A webhook endpoint on a local port, answering 200 to every request."""
    found = asyncio.run(ThreadedReceiver().start())
    try:
        yield found
    finally:
        asyncio.run(found.stop())


def test_a_report_is_accepted_then_followed_over_sse_to_its_result(
    served: Served, start_worker: Callable[[], None]
) -> None:
    with served.client("ann") as ann, served.client("bob") as bob:
        accepted = ann.post(
            "/reports", json={"rows": ROWS}, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
        assert accepted.status_code == 202, accepted.text
        url = accepted.headers["location"]
        assert url.startswith(f"{served.url}/ustun/jobs/job_")
        assert (accepted.headers["etag"], accepted.headers["retry-after"]) == ('"1"', "1")
        job = accepted.json()
        assert (job["object"], job["kind"], job["status"]) == ("job", "shop.report", "pending")

        # Followed from before any worker runs (when this test is the first to want one):
        # the first event is read at once, the rest as the worker runs the job.
        with ann.stream("GET", f"{url}/events") as response:
            stream = stream_events(response)
            events = [next(stream)]
            start_worker()
            events += list(stream)
        assert [event_id for event_id, _, _ in events] == list(range(1, len(events) + 1))
        statuses = [data["status"] for _, _, data in events]
        assert (statuses[0], statuses[1], statuses[-1]) == ("pending", "processing", "done")
        assert [data["progress"] for _, _, data in events][2:] == [25, 50, 75, 100, 100]
        final = events[-1][0]

        done = ann.get(url)
        assert done.status_code == 200, done.text
        assert done.headers["etag"] == f'"{final}"'
        assert "retry-after" not in done.headers
        assert (done.json()["status"], done.json()["progress"]) == ("done", 100)
        unchanged = ann.get(url, headers={"If-None-Match": done.headers["etag"]})
        assert (unchanged.status_code, unchanged.content) == (304, b"")

        result = ann.get(done.json()["result_url"])
        assert result.status_code == 200
        assert result.headers["content-type"].startswith("text/csv")
        lines = result.text.splitlines()
        assert (lines[0], lines[-1], len(lines)) == ("n,square", f"{ROWS},{ROWS * ROWS}", ROWS + 1)

        # Resumed after the last event a client saw; 204 once it saw the final one.
        assert stream_ids(ann, url, last=3) == list(range(4, final + 1))
        assert ann.get(f"{url}/events", headers={"Last-Event-ID": str(final)}).status_code == 204
        problem_of(ann.get(f"{url}/events", headers={"Last-Event-ID": "-1"}), 400, "bad-request")

        # Another account's job does not exist for bob, nor does a job that is nobody's.
        for path in (url, f"{url}/events", f"{url}/result"):
            problem_of(bob.get(path), 404, "not-found")
        problem_of(ann.get(f"{served.url}/ustun/jobs/job_nothing"), 404, "not-found")
    assert httpx.get(url).status_code == 401


def test_a_committed_payment_is_delivered_signed_and_a_raised_one_never(
    shop: Shop,
    served: Served,
    start_worker: Callable[[], None],
    receiver: ThreadedReceiver,
) -> None:
    start_worker()
    key = str(uuid.uuid4())
    with served.client("bob") as bob:
        register = {"url": receiver.url("/hooks"), "events": ["payment.*"]}
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
        problem_of(refused, 422, "validation-error")
        bad_type = {"url": receiver.url("/hooks"), "events": ["bad pattern"]}
        refused = bob.post(
            "/webhook-endpoints", json=bad_type, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
        assert problem_of(refused, 422, "validation-error")["detail"].startswith(
            "Invalid value in body.events"
        )

        payment = {"amount": 301, "currency": "EUR"}
        failed = bob.post(
            "/faults/raise", json=payment, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
        assert failed.status_code == 500
        paid = bob.post("/payments", json=payment, headers={"Idempotency-Key": str(uuid.uuid4())})
        assert paid.status_code == 201, paid.text

    [delivered] = wait_for(
        lambda: receiver.received, timeout=30, what="the event at the endpoint:\n" + shop.logs()
    )
    assert delivered.path == "/hooks"
    event = Webhook(secret).verify(delivered.body, delivered.headers)
    assert (event["type"], event["data"]) == ("payment.created", paid.json())
    # The raised handler's event never committed: this payment's is the one event.
    assert payment_events(shop, 301) == [event["id"]]
