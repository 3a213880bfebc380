"""The circuit breaker per endpoint, on SQLite and PostgreSQL, against real local receivers.

After `THRESHOLD` consecutive failed attempts nothing of the endpoint is sent until its probe
time; then one delivery probes it (across every worker process); a failed probe opens the
circuit again, a successful one closes it and the backlog flows. Every attempt is judged from
the attempts log and the receiver: nothing but the failures counted and one success per
delivery is ever sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from sqlalchemy import select

from dashboard_support import log_in
from support import UstunProcess, in_background
from ustun import clock
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.webhooks import circuit
from ustun.webhooks import endpoints as ops
from ustun.webhooks.adapters import for_database
from ustun.webhooks.records import Endpoint
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending import transport
from ustun.webhooks.sending.dispatcher import DispatchConfig, Dispatcher, _Result
from ustun.webhooks.sending.outbox import emit
from ustun.webhooks.tables import attempts, deliveries
from webhook_support import MakeEndpoint, Receiver, Reply, delivery_of, status, until

THRESHOLD = 3
COOLDOWN = 1.0
# Retries soon, and enough of them that no delivery dies while the circuit holds it.
RETRIES = (0.2,) * 8


@pytest.fixture
def breaker(config: DispatchConfig) -> DispatchConfig:
    return dataclasses.replace(
        config,
        retry_schedule=RETRIES,
        circuit_failures=THRESHOLD,
        circuit_cooldown=COOLDOWN,
        poll_interval=0.05,
    )


async def _emit(db: Database, account_id: str, count: int) -> list[str]:
    """`count` events committed together (so one claim takes them together); their ids."""
    async with db.unit_of_work() as uow:
        return [
            await emit(uow, account_id, "payment.created", {"id": f"pay_{n}"}) for n in range(count)
        ]


async def _endpoint(db: Database, account_id: str, endpoint_id: str) -> Endpoint:
    async with db.read() as conn:
        row = await for_database(db).endpoint(conn, account_id, endpoint_id)
    assert row is not None
    return row


def _state(row: Endpoint) -> str:
    return circuit.state(row.circuit_open_until, clock.now())


async def _attempts(db: Database, endpoint_id: str) -> list[Any]:
    """Every attempt at the endpoint's deliveries, in the order they were made."""
    async with db.read() as conn:
        rows = await conn.execute(
            select(attempts.c.attempted_at, attempts.c.status_code, attempts.c.delivery_id)
            .join(deliveries, deliveries.c.id == attempts.c.delivery_id)
            .where(deliveries.c.endpoint_id == endpoint_id)
            .order_by(attempts.c.attempted_at, attempts.c.id)
        )
        return list(rows)


async def _all_succeeded(db: Database, event_ids: list[str]) -> bool:
    rows = [await delivery_of(db, event_id) for event_id in event_ids]
    return all(row.status == "succeeded" for row in rows)


def _gap(later: Any, earlier: Any) -> float:
    return float((later.attempted_at - earlier.attempted_at).total_seconds())


def _probes_spaced(tried: list[Any], failing_probes: int) -> None:
    """From the failure that opened the circuit to the probe that closed it, each attempt came
    a whole cool-down after the one before: nothing was sent while open, one probe at a time."""
    window = tried[THRESHOLD - 1 : THRESHOLD + failing_probes + 1]
    assert [a.status_code for a in window] == [500] * (failing_probes + 1) + [200]
    gaps = [_gap(b, a) for a, b in itertools.pairwise(window)]
    assert all(gap >= COOLDOWN for gap in gaps), gaps


async def test_an_open_circuit_sends_nothing_until_one_probe_closes_it(
    db: Database,
    box: SecretBox,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    breaker: DispatchConfig,
) -> None:
    receiver.script["/hook"] = [status(500) for _ in range(THRESHOLD + 1)]
    endpoint_id, _ = await make_endpoint(receiver.url())

    async def opened_after(before: datetime | None) -> Endpoint | None:
        row = await _endpoint(db, account_id, endpoint_id)
        reopened = before is None or (row.circuit_open_until or before) > before
        return row if _state(row) == circuit.OPEN and reopened else None

    async with in_background(Dispatcher(db, box, breaker)):
        first = await _emit(db, account_id, THRESHOLD)
        opened = await until(lambda: opened_after(None), what="the circuit to open")
        assert opened.circuit_failures == THRESHOLD
        assert len(receiver.received) == THRESHOLD
        backlog = await _emit(db, account_id, 5)
        queued = [await delivery_of(db, event_id) for event_id in backlog]
        reopened = await until(
            lambda: opened_after(opened.circuit_open_until), what="the failed probe to reopen it"
        )
        assert len(receiver.received) == THRESHOLD + 1  # one probe, and it failed
        assert reopened.circuit_failures == THRESHOLD + 1
        held = [await delivery_of(db, event_id) for event_id in backlog]
        tried_first = [await delivery_of(db, event_id) for event_id in first]
        # The probe (the soonest due delivery) made the one attempt more; every other waiting
        # delivery was never claimed: no attempt, its due time untouched.
        assert sum(r.attempt_count for r in held + tried_first) == THRESHOLD + 1
        waiting = [(q, r) for q, r in zip(queued, held, strict=True) if r.attempt_count == 0]
        assert len(waiting) >= len(backlog) - 1
        assert [(r.status, r.next_attempt_at, r.lease_token) for _, r in waiting] == [
            (q.status, q.next_attempt_at, None) for q, _ in waiting
        ]
        await until(lambda: _all_succeeded(db, first + backlog), what="the backlog to flow")

    row = await _endpoint(db, account_id, endpoint_id)
    assert (_state(row), row.circuit_failures, row.circuit_open_until) == (circuit.CLOSED, 0, None)
    tried = await _attempts(db, endpoint_id)
    # Only the failures counted, then one success per delivery.
    assert len(tried) == THRESHOLD + 1 + len(first + backlog)
    assert opened.circuit_open_until is not None
    assert reopened.circuit_open_until is not None
    assert tried[THRESHOLD].attempted_at >= opened.circuit_open_until
    assert tried[THRESHOLD + 1].attempted_at >= reopened.circuit_open_until
    _probes_spaced(tried, failing_probes=1)
    assert len(receiver.received) == len(tried)


def _slow_failure(seconds: float) -> Reply:
    """A 500 after `seconds`: a probe in flight that long, for another worker to race."""

    async def reply(_: web.Request) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(status=500, text="down")

    return reply


@pytest.fixture
async def own_db(own_database_url: str) -> AsyncIterator[Database]:
    database = Database(own_database_url)
    yield database
    await database.dispose()


async def _account_and_endpoint(db: Database, box: SecretBox, url: str) -> tuple[str, str]:
    """A new account with one endpoint at `url`: their ids."""
    account = await account_for_key(db, await create_key(db, f"cb-{uuid.uuid4().hex[:8]}"))
    assert account is not None
    async with db.unit_of_work() as uow:
        endpoint_id, _ = await ops.create(uow, box, account.id, url=url, events=("*",))
    return account.id, endpoint_id


@pytest.mark.e2e
async def test_two_worker_processes_send_one_probe_per_half_open_period(
    own_database_url: str, own_db: Database, box: SecretBox, tmp_path: Path
) -> None:
    db = own_db
    failing_probes = 3
    receiver = await Receiver().start()
    receiver.script["/hook"] = [_slow_failure(0.3) for _ in range(THRESHOLD + failing_probes)]
    account_id, endpoint_id = await _account_and_endpoint(db, box, receiver.url())
    env = {
        "USTUN_DATABASE_URL": own_database_url,
        "USTUN_WEBHOOK_ALLOW_PRIVATE": "1",
        "USTUN_WEBHOOK_RETRY_SCHEDULE": ",".join(str(d) for d in RETRIES),
        "USTUN_WEBHOOK_CIRCUIT_FAILURES": str(THRESHOLD),
        "USTUN_WEBHOOK_CIRCUIT_COOLDOWN": str(COOLDOWN),
        "USTUN_LOG_LEVEL": "warning",
    }
    workers = [
        UstunProcess(["worker"], env, tmp_path / f"worker-{n}.log").start() for n in range(2)
    ]
    try:
        first = await _emit(db, account_id, THRESHOLD)

        async def opened() -> bool:
            assert all(w.alive() for w in workers), [w.output() for w in workers]
            return _state(await _endpoint(db, account_id, endpoint_id)) == circuit.OPEN

        await until(opened, within=30, what="the circuit to open")
        backlog = await _emit(db, account_id, 10)
        await until(
            lambda: _all_succeeded(db, first + backlog), within=60, what="the backlog to flow"
        )
    finally:
        for worker in workers:
            worker.stop()
        await receiver.stop()

    tried = await _attempts(db, endpoint_id)
    assert len(tried) == THRESHOLD + failing_probes + len(first + backlog)
    _probes_spaced(tried, failing_probes)
    row = await _endpoint(db, account_id, endpoint_id)
    assert (row.circuit_failures, row.circuit_open_until) == (0, None)


async def _circuit_set(db: Database, endpoint_id: str, failures: int, open_until: datetime) -> None:
    """Record `failures` failed attempts (the circuit opens at `THRESHOLD`) until `open_until`."""
    async with db.unit_of_work() as uow:
        await for_database(db).circuit_failed(
            uow,
            {endpoint_id: failures},
            threshold=THRESHOLD,
            open_until=open_until,
            now=clock.now(),
        )


async def test_the_api_and_the_dashboard_show_the_circuit(
    db: Database, api_key: str, make_endpoint: MakeEndpoint, browser: httpx.AsyncClient
) -> None:
    endpoint_id, _ = await make_endpoint("https://hooks.example.com/circuit")
    bearer = {"authorization": f"Bearer {api_key}"}
    await log_in(browser, api_key)

    async def shown() -> tuple[dict[str, Any], str, str, str]:
        answer = await browser.get(f"/v1/webhook-endpoints/{endpoint_id}", headers=bearer)
        assert answer.status_code == 200, answer.text
        page = html.unescape((await browser.get(f"/dashboard/endpoints/{endpoint_id}")).text)
        listing = (await browser.get("/dashboard/endpoints")).text
        return answer.json()["circuit"], answer.headers["etag"], page, listing

    state, closed_tag, page, listing = await shown()
    assert state == {"state": "closed", "failures": 0, "probe_at": None}
    assert "circuit closed (0 consecutive failed attempts)" in page
    assert 'data-circuit="closed"' not in listing  # the list names only a circuit not closed

    probe_at = clock.now() + timedelta(minutes=5)
    await _circuit_set(db, endpoint_id, THRESHOLD, probe_at)
    state, open_tag, page, listing = await shown()
    assert state == {"state": "open", "failures": THRESHOLD, "probe_at": clock.rfc3339(probe_at)}
    assert open_tag != closed_tag  # a change of the representation moves its ETag
    assert "circuit open: nothing is sent until the probe at" in page
    assert '<span data-circuit="open">circuit open</span>' in listing

    await _circuit_set(db, endpoint_id, 1, clock.now() - timedelta(seconds=1))
    state, _, page, listing = await shown()
    assert state["state"] == "half_open"
    assert state["failures"] == THRESHOLD + 1
    assert "circuit half-open: one delivery at a time probes the endpoint" in page
    assert '<span data-circuit="half_open">circuit half-open</span>' in listing

    async with db.unit_of_work() as uow:
        await for_database(db).circuit_closed(uow, [endpoint_id], clock.now())
    state, _, _, _ = await shown()
    assert state == {"state": "closed", "failures": 0, "probe_at": None}


async def test_with_the_breaker_off_retries_go_on_and_a_circuit_left_open_closes(
    db: Database,
    box: SecretBox,
    account_id: str,
    receiver: Receiver,
    make_endpoint: MakeEndpoint,
    breaker: DispatchConfig,
) -> None:
    off = dataclasses.replace(breaker, circuit_failures=0, circuit_cooldown=60.0)
    failures = THRESHOLD * 2
    receiver.script["/hook"] = [status(500) for _ in range(failures)]
    endpoint_id, _ = await make_endpoint(receiver.url())
    # Left half-open when the breaker was on: its first outcome closes it.
    await _circuit_set(db, endpoint_id, THRESHOLD, clock.now() - timedelta(seconds=1))
    async with in_background(Dispatcher(db, box, off)):
        (event_id,) = await _emit(db, account_id, 1)
        await until(lambda: _all_succeeded(db, [event_id]), what="the retries to succeed")
    assert (await delivery_of(db, event_id)).attempt_count == failures + 1
    row = await _endpoint(db, account_id, endpoint_id)
    assert (row.circuit_failures, row.circuit_open_until) == (0, None)


async def _claim_all(dispatcher: Dispatcher, db: Database) -> list[Any]:
    now = clock.now()
    claimed = await dispatcher.store.claim(
        db, limit=10, now=now, lease_until=now + timedelta(seconds=30), token=dispatcher.token
    )
    await dispatcher._targets(claimed, now)
    return claimed


def _answered(item: Any, endpoint_id: str, code: int) -> _Result:
    return _Result(item, endpoint_id, transport.Outcome(code, 1.0), clock.now())


async def test_a_success_in_the_same_batch_as_failures_closes_the_circuit(
    own_db: Database, box: SecretBox, breaker: DispatchConfig
) -> None:
    """Outcomes recorded as the dispatcher's writer records a batch, on a database of the
    test's own (its claims take every due delivery there)."""
    db = own_db
    account_id, endpoint_id = await _account_and_endpoint(db, box, "https://hooks.example.com/b")
    dispatcher = Dispatcher(db, box, breaker)
    async with db.unit_of_work() as uow:
        await dispatcher.store.mark_failing(uow, [endpoint_id], clock.now())
    await _circuit_set(db, endpoint_id, THRESHOLD - 1, clock.now())

    await _emit(db, account_id, 3)
    first, second, third = await _claim_all(dispatcher, db)
    await dispatcher._record(
        [_answered(first, endpoint_id, 500), _answered(second, endpoint_id, 200)]
    )
    row = await _endpoint(db, account_id, endpoint_id)
    assert (row.circuit_failures, row.circuit_open_until, row.failing_since) == (0, None, None)

    # A failure alone counts from 0; two failures in one batch count two, reaching the threshold.
    await dispatcher._record([_answered(third, endpoint_id, 500)])
    assert (await _endpoint(db, account_id, endpoint_id)).circuit_failures == 1
    retried: list[Any] = []

    async def both_due_again() -> bool:
        retried.extend(await _claim_all(dispatcher, db))
        return len(retried) == 2

    await until(both_due_again, what="the two failed deliveries' retries")
    await dispatcher._record([_answered(item, endpoint_id, 500) for item in retried])
    row = await _endpoint(db, account_id, endpoint_id)
    assert row.circuit_failures == THRESHOLD
    assert _state(row) == circuit.OPEN


async def test_concurrent_batches_add_their_failures_up(
    db: Database, make_endpoint: MakeEndpoint, account_id: str
) -> None:
    endpoint_id, _ = await make_endpoint("https://hooks.example.com/race")
    later = clock.now() + timedelta(minutes=1)
    await asyncio.gather(*(_circuit_set(db, endpoint_id, 1, later) for _ in range(4)))
    row = await _endpoint(db, account_id, endpoint_id)
    assert row.circuit_failures == 4
    assert _state(row) == circuit.OPEN
