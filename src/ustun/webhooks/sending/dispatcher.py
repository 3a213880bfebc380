"""The dispatcher: claims due deliveries, sends them, records every attempt.

One loop per worker process, with no SQL of its own: every read and write goes through the
webhooks store (`webhooks.store`, one adapter per dialect). It claims in batches with a lease
(a claim brings the events along); the database gives each endpoint no more than its room
across every worker (`max_in_flight`, FIFO order, rate-limit slots), so each claimed delivery is
sent at once, or at the send time its claim gave it; a claim skips the endpoints this worker's
own requests already fill. It keeps endpoints decrypted until their version changes, sends with
one shared aiohttp session or publishes through the broker pool (`webhooks.brokers`), and hands
outcomes to a writer task that records them in batched transactions; a batch that fails is
recorded again outcome by outcome, so one outcome can never keep another from being recorded. A
finished request frees its endpoint's room at once (the claim does not count it), before its
outcome is recorded. No account holds more than its share of the worker's slots (an equal part
for each account sending and one more, so a newcomer always finds room: half of them while one
account sends), and a claim hands out due deliveries in turns across accounts, so one account's
slow or dead endpoints never hold up another's deliveries. It sleeps until an event is
committed (PostgreSQL LISTEN/NOTIFY, the in-process doorbell), a request finishes, a retry falls
due, or the poll interval passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import aiohttp

from ustun import clock, ids, instrumentation, tracing
from ustun.defaults import (
    DEFAULT_DISPATCHER_MAX_IN_FLIGHT,
    DEFAULT_WEBHOOK_CIRCUIT_COOLDOWN,
    DEFAULT_WEBHOOK_CIRCUIT_FAILURES,
    DEFAULT_WEBHOOK_CLAIM_BATCH,
    DEFAULT_WEBHOOK_POLL_INTERVAL,
)
from ustun.http.retry_after import parse_retry_after
from ustun.http.signature import headers as signed_headers
from ustun.store import Database, UnitOfWork
from ustun.webhooks import catalog, retention
from ustun.webhooks import endpoints as endpoint_ops
from ustun.webhooks.adapters import for_database
from ustun.webhooks.brokers import Brokers
from ustun.webhooks.operational import ATTEMPT_EXHAUSTED, ENDPOINT_RECOVERED, OPERATIONAL
from ustun.webhooks.records import EXPUNGED_DATA
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.sending import message, oauth2, transport
from ustun.webhooks.sending.outbox import EVENT_ID, emit
from ustun.webhooks.sending.pacing import Pacer
from ustun.webhooks.sending.schedule import RETRY_AFTER_STATUSES, retry_delay
from ustun.webhooks.sending.verdict import ABORTED_BY_RECEIVER, Verdict, verdict
from ustun.webhooks.sending.wakeup import doorbell
from ustun.webhooks.states import Change, Status, transition
from ustun.webhooks.store import Attempt, Claim, Settlement

log = logging.getLogger("ustun.webhooks")

DISABLE_AFTER = timedelta(days=5)
RECOVERED_REASON = "a delivery succeeded after failures"
# The span of each attempt (`ustun.tracing`): a POST, or a broker publish; and its attributes.
ATTEMPT_SPAN = "ustun.webhook.attempt"
PUBLISH_SPAN = "ustun.broker.publish"
DELIVERY_ID = "ustun.delivery.id"
ENDPOINT_ID = "ustun.endpoint.id"
WRITE_BATCH = 512
# A flush waits up to WRITE_DELAY for more outcomes, but no longer than WRITE_QUIET after the
# last one: a claimed batch's answers arrive together, and one transaction records them all.
WRITE_DELAY = 0.02
WRITE_QUIET = 0.002


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    """Tuning of one dispatcher; the service builds it from `Settings`."""

    retry_schedule: Sequence[float]
    timeout: float
    allow_private: bool
    lease: float
    # The service's public URL: a thin payload's `data.url` is the object's path under it.
    public_url: str
    poll_interval: float = DEFAULT_WEBHOOK_POLL_INTERVAL
    batch: int = DEFAULT_WEBHOOK_CLAIM_BATCH
    max_in_flight: int = DEFAULT_DISPATCHER_MAX_IN_FLIGHT
    disable_after: timedelta = DISABLE_AFTER
    # The circuit breaker (`webhooks.circuit`): consecutive failed attempts that open an
    # endpoint's circuit (0: no breaker), and the seconds it stays open before its probe.
    circuit_failures: int = DEFAULT_WEBHOOK_CIRCUIT_FAILURES
    circuit_cooldown: float = DEFAULT_WEBHOOK_CIRCUIT_COOLDOWN


@dataclass(slots=True)
class _Result:
    claim: Claim
    endpoint_id: str
    outcome: transport.Outcome | None
    attempted_at: datetime
    reason: str = ""


@dataclass(slots=True)
class _Batch:
    """What a writer flush applies in one transaction."""

    updates: list[Settlement] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    healthy: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)
    # Failed attempts (`Verdict.RETRY`) by endpoint, for its circuit.
    failed: Counter[str] = field(default_factory=Counter)
    gone: set[str] = field(default_factory=set)
    # Deliveries given up (`dead`) whose event is not operational: each gets its
    # `message.attempt.exhausted`, if this worker's settlement of it commits.
    exhausted: list[_Exhausted] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Exhausted:
    claim: Claim
    endpoint_id: str
    attempts: int
    last_status: int | None
    last_error: str | None


class Dispatcher:
    """Delivers webhooks until stopped; run one per worker process (any number of processes)."""

    def __init__(self, db: Database, box: SecretBox, config: DispatchConfig) -> None:
        self.db = db
        self.store = for_database(db)
        self.box = box
        self.config = config
        self.token = ids.new_id("lease")
        self._tasks: set[asyncio.Task[None]] = set()
        self._results: asyncio.Queue[_Result] = asyncio.Queue()
        self._wake = asyncio.Event()
        self._soonest: float | None = None
        self._endpoints: dict[str, endpoint_ops.Target] = {}
        # Broker connections open on first use: no broker endpoint, no client library import.
        self._brokers = Brokers(timeout=config.timeout, allow_private=config.allow_private)
        # OAuth2 bearer tokens of the endpoints that require one, kept until shortly before expiry.
        self._tokens = oauth2.Tokens(allow_private=config.allow_private)
        # Endpoints that may have a failing streak to clear on their next success.
        self._failing: set[str] = set()
        self._pacer = Pacer()
        # Deliveries whose request is over, until their outcome is recorded: the claim does not
        # count them against their endpoint's room, so a batch's answers free it at once.
        self._finished: set[str] = set()
        # Requests under way by endpoint: a claim skips the endpoints this worker alone fills.
        self._sending: Counter[str] = Counter()
        # Requests under way by account: a claim skips the accounts at their share of the slots.
        self._account_sending: Counter[str] = Counter()

    async def run(self, stopping: asyncio.Event) -> None:
        """The worker loop: deliver until `stopping` is set, then finish what is in flight."""
        doorbell.subscribe(self._wake)
        stop_watch = asyncio.create_task(self._watch(stopping))
        http = transport.session(
            timeout=self.config.timeout,
            allow_private=self.config.allow_private,
            limit=self.config.max_in_flight,
        )
        writer = asyncio.create_task(self._write())
        try:
            async with http, self._brokers, self._listening():
                while not stopping.is_set():
                    self._wake.clear()
                    if not await self._claim_and_send(http):
                        await self._sleep()
                if self._tasks:
                    await asyncio.wait(self._tasks)
                await self._results.join()
        finally:
            doorbell.unsubscribe(self._wake)
            stop_watch.cancel()
            writer.cancel()
            for task in self._tasks:
                task.cancel()

    async def _watch(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        self._wake.set()

    @contextlib.asynccontextmanager
    async def _listening(self) -> AsyncIterator[None]:
        """Listen (PostgreSQL) so a commit in any process wakes this dispatcher at once."""
        listener = self.store.listener(self.db, self._wake.set)
        if listener is None:
            yield
            return
        stopping = asyncio.Event()
        listening = asyncio.create_task(listener.run(stopping))
        try:
            yield
        finally:
            stopping.set()
            await listening

    async def _sleep(self) -> None:
        timeout = self.config.poll_interval
        if self._soonest is not None:
            left = self._soonest - time.monotonic()
            if left <= 0:
                self._soonest = None  # that retry was due, so the claim just made took it
            timeout = max(0.0, min(timeout, left))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _claim_and_send(self, http: aiohttp.ClientSession) -> bool:
        """Claim what fits and start sending it; True if more may be due right now."""
        room = min(self.config.batch, self.config.max_in_flight - len(self._tasks))
        if room <= 0:
            return False
        now = clock.now()
        share = self.config.max_in_flight // max(2, len(self._account_sending) + 1)
        claimed = await self.store.claim(
            self.db,
            limit=room,
            now=now,
            lease_until=now + timedelta(seconds=self.config.lease),
            token=self.token,
            finished=self._finished,
            skip=self._full(),
            account_room={a: share - n for a, n in self._account_sending.items()},
            account_limit=share,
        )
        if not claimed:
            return False
        targets = await self._targets(claimed, now)
        parents = await self._trace_parents(claimed)
        bodies: dict[tuple[str, str], bytes] = {}
        for item in sorted(claimed, key=lambda c: c.send_at):  # paced sends start in slot order
            endpoint = targets.get(item.endpoint_id)
            if endpoint is None:
                continue  # deleted since the claim, and its deliveries with it
            if item.event_data == EXPUNGED_DATA:  # expunged since it was made due: never sent
                self._finished.add(item.id)
                self._results.put_nowait(
                    _Result(item, endpoint.id, None, now, reason=retention.EXPUNGED_REASON)
                )
                continue
            body = bodies.get((item.event_id, endpoint.payload))
            if body is None:
                body = bodies[(item.event_id, endpoint.payload)] = _body(
                    item, endpoint.payload, self.config.public_url
                )
            self._sending[endpoint.id] += 1
            self._account_sending[endpoint.account_id] += 1
            parent = parents.get(item.event_id)
            task = asyncio.create_task(self._deliver(http, item, endpoint, body, parent))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # A full batch may have left more due; endpoints at their room wait for outcomes.
        return len(claimed) == room

    def _full(self) -> list[str]:
        """The endpoints whose room this worker's own requests fill: no claim can take any."""
        return [
            endpoint_id
            for endpoint_id, sending in self._sending.items()
            if endpoint_id in self._endpoints and sending >= self._endpoints[endpoint_id].room
        ]

    async def _targets(self, claimed: list[Claim], now: datetime) -> dict[str, endpoint_ops.Target]:
        """The claimed rows' endpoints, secrets decrypted; kept until their version changes."""
        stale = set()
        for item in claimed:
            if item.endpoint_failing:
                self._failing.add(item.endpoint_id)
            cached = self._endpoints.get(item.endpoint_id)
            if cached is None or not cached.current(item.endpoint_version, now):
                stale.add(item.endpoint_id)
        if stale:
            for endpoint_id in stale:
                self._endpoints.pop(endpoint_id, None)  # gone, unless the read finds it
            async with self.db.read() as conn:
                found = await self.store.endpoint_rows(conn, stale)
            for row in found:
                self._endpoints[row.id] = endpoint_ops.target(self.box, row, now)
        return self._endpoints

    async def _trace_parents(self, claimed: list[Claim]) -> dict[str, str]:
        """The claimed deliveries' events' trace context, by event id; none with tracing off."""
        if not tracing.ENABLED:
            return {}
        async with self.db.read() as conn:
            return await self.store.traceparents(conn, (c.event_id for c in claimed))

    async def _deliver(
        self,
        http: aiohttp.ClientSession,
        item: Claim,
        endpoint: endpoint_ops.Target,
        body: bytes,
        parent: str | None,
    ) -> None:
        """Send one delivery at its send time and queue the outcome; its attempt's span a child
        of its event's (`parent`)."""
        if not endpoint.enabled:
            result = _Result(item, endpoint.id, None, clock.now(), reason="endpoint disabled")
        else:
            if endpoint.rate_limit is not None:
                await self._pacer.wait(endpoint.id, item.send_at)  # its slot, from the claim
            attempted_at = clock.now()
            try:
                outcome = await self._send(http, item, endpoint, body, parent)
            except Exception as error:  # a fault of ours or a library's: a failed attempt
                log.exception("sending delivery %s failed unexpectedly", item.id)
                outcome = transport.Outcome(
                    None, 0.0, error=f"internal error: {type(error).__name__}"
                )
            instrumentation.emit(
                "delivery_attempt", outcome.latency_ms / 1000, outcome=outcome.kind
            )
            result = _Result(item, endpoint.id, outcome, attempted_at)
        self._finished.add(item.id)
        _release(self._sending, endpoint.id)
        _release(self._account_sending, endpoint.account_id)
        self._results.put_nowait(result)
        self._wake.set()  # its endpoint has room again, before the outcome is even recorded

    async def _send(
        self,
        http: aiohttp.ClientSession,
        item: Claim,
        endpoint: endpoint_ops.Target,
        body: bytes,
        parent: str | None,
    ) -> transport.Outcome:
        """POST to an HTTP endpoint or publish to a broker one, with the same signed headers
        (and the `traceparent` of the attempt's span, tracing on)."""
        headers = signed_headers(endpoint.signing, item.event_id, body)
        broker = endpoint.destination is not None
        with tracing.span(
            PUBLISH_SPAN if broker else ATTEMPT_SPAN,
            kind="producer" if broker else "client",
            parent=parent,
            attributes={DELIVERY_ID: item.id, EVENT_ID: item.event_id, ENDPOINT_ID: endpoint.id},
        ) as span:
            tracing.inject(headers)
            outcome: transport.Outcome
            if endpoint.destination is not None:
                outcome = await self._brokers.publish(
                    endpoint.destination, item.event_type, item.event_id, body, headers
                )
            else:
                outcome = await self._post(http, endpoint, body, headers)
            tracing.attempt_outcome(span, ok=outcome.ok, status=outcome.status, error=outcome.error)
        return outcome

    async def _post(
        self,
        http: aiohttp.ClientSession,
        endpoint: endpoint_ops.Target,
        body: bytes,
        headers: dict[str, str],
    ) -> transport.Outcome:
        """POST to an HTTP endpoint with its own TLS context, and its bearer token if it has
        OAuth2 credentials."""
        allow_private = self.config.allow_private
        if endpoint.oauth2 is not None:
            return await oauth2.post(
                http,
                self._tokens,
                endpoint.oauth2,
                endpoint.url,
                body,
                headers,
                allow_private=allow_private,
                tls=endpoint.tls,
            )
        return await transport.post(
            http, endpoint.url, body, headers, allow_private=allow_private, tls=endpoint.tls
        )

    async def _write(self) -> None:
        """Record outcomes in batches: one transaction for whatever has queued up."""
        while True:
            results = await self._gather()
            try:
                await self._record_apart(results)
            finally:
                for result in results:
                    self._finished.discard(result.claim.id)
                    self._results.task_done()

    async def _record_apart(self, results: list[_Result]) -> None:
        """Record the batch in one transaction; if that fails, each outcome in one of its own,
        so an outcome that cannot be recorded keeps no other from it."""
        try:
            await self._record(results)
            return
        except Exception:
            if len(results) == 1:
                log.exception(
                    "recording the outcome of delivery %s failed; its lease will retry it",
                    results[0].claim.id,
                )
                return
            log.exception(
                "recording %d webhook outcomes at once failed; recording each alone", len(results)
            )
        for result in results:
            await self._record_apart([result])

    async def _gather(self) -> list[_Result]:
        """The next outcome and those that follow it closely: fewer, larger transactions."""
        results = [await self._results.get()]
        deadline = time.monotonic() + WRITE_DELAY
        quiet_from = time.monotonic()
        while len(results) < WRITE_BATCH:
            if not self._results.empty():
                results.append(self._results.get_nowait())
                quiet_from = time.monotonic()
                continue
            now = time.monotonic()
            if now >= deadline or now - quiet_from >= WRITE_QUIET:
                break
            # Polled, not `wait_for(get())`: a timed-out get can drop an outcome (Python 3.11).
            await asyncio.sleep(WRITE_QUIET / 2)
        return results

    def _plan(self, result: _Result, now: datetime, batch: _Batch) -> None:
        """Turn one outcome into the delivery update, attempt row and endpoint health marks."""
        item, outcome = result.claim, result.outcome
        attempts_made = item.attempt_count
        next_at: datetime | None = None
        if outcome is None:
            change = Change.GIVE_UP
            if result.reason == retention.EXPUNGED_REASON:
                batch.attempts.append(retention.not_sent(item.id, result.attempted_at))
        else:
            attempts_made += 1
            judged = verdict(outcome)
            aborted = judged is Verdict.ABORTED
            batch.attempts.append(
                Attempt(
                    ids.new_id("att"),
                    item.id,
                    result.attempted_at,
                    outcome.status,
                    round(outcome.latency_ms, 3),
                    ABORTED_BY_RECEIVER if aborted else outcome.error,
                    outcome.response,
                )
            )
            if judged is Verdict.SUCCEEDED:
                change = Change.SUCCEED
                batch.healthy.add(result.endpoint_id)
            elif judged is Verdict.GONE:
                change = Change.GIVE_UP
                batch.gone.add(result.endpoint_id)
            elif judged in (Verdict.ABORTED, Verdict.REFUSED):
                # The receiver asked for no retry (its endpoint stays enabled, no failing streak
                # starts), or the broker can never take the message.
                change = Change.GIVE_UP
            else:
                batch.failing.add(result.endpoint_id)
                batch.failed[result.endpoint_id] += 1
                retry_after = (
                    parse_retry_after(outcome.retry_after)
                    if outcome.status in RETRY_AFTER_STATUSES
                    else None
                )
                schedule = (
                    catalog.active.retry_schedule(item.event_type) or self.config.retry_schedule
                )
                delay = retry_delay(schedule, attempts_made, retry_after=retry_after)
                change = Change.GIVE_UP if delay is None else Change.FAIL
                if delay is not None:
                    next_at = now + timedelta(seconds=delay)
                    due = time.monotonic() + delay
                    self._soonest = due if self._soonest is None else min(self._soonest, due)
        status = transition(item.status, change)
        batch.updates.append(Settlement(item.id, status.value, attempts_made, next_at))
        if status is Status.DEAD and item.event_type not in OPERATIONAL:  # no loop
            last = batch.attempts[-1] if outcome is not None else None
            batch.exhausted.append(
                _Exhausted(
                    item,
                    result.endpoint_id,
                    attempts_made,
                    None if last is None else last.status_code,
                    result.reason if last is None else last.error,
                )
            )

    async def _record(self, results: list[_Result]) -> None:
        now = clock.now()
        batch = _Batch()
        for result in results:
            self._plan(result, now, batch)
        async with self.db.unit_of_work() as uow:
            exhausted = batch.exhausted
            if exhausted:  # only those this settlement will make dead (the lease still held)
                held = await self.store.held(uow, [e.claim.id for e in exhausted], self.token)
                exhausted = [e for e in exhausted if e.claim.id in held]
            await self.store.settle(uow, batch.updates, batch.attempts, now=now, token=self.token)
            for dead in exhausted:
                await self._log_exhausted(uow, dead)
            await self._endpoint_health(uow, batch, now)
        if any(update.next_attempt_at is not None for update in batch.updates):
            self._wake.set()  # a retry may now be due sooner than the loop's next wake

    async def _endpoint_health(self, uow: UnitOfWork, batch: _Batch, now: datetime) -> None:
        """Clear or start each endpoint's failing streak and count its circuit's failures (a
        success closes it); disable on 410 or 5 days of failure."""
        recovered = batch.healthy & self._failing
        if recovered:
            for row in await self.store.clear_failing(uow, recovered):
                await endpoint_ops.log_change(uow, row, ENDPOINT_RECOVERED, RECOVERED_REASON)
            await self.store.circuit_closed(uow, recovered, now)
            self._failing -= recovered
        failing = batch.failing - batch.healthy
        self._failing |= failing
        if failing:
            await self.store.mark_failing(uow, failing, now)
            await self._circuit_failed(uow, {e: batch.failed[e] for e in failing}, now)
            expired = await self.store.failing_since(uow, failing, now - self.config.disable_after)
            for endpoint_id in expired:
                await endpoint_ops.disable(uow, endpoint_id, "failing for 5 days")
        for endpoint_id in batch.gone:
            await endpoint_ops.disable(uow, endpoint_id, "the endpoint answered 410 Gone")

    async def _circuit_failed(
        self, uow: UnitOfWork, failures: dict[str, int], now: datetime
    ) -> None:
        """Count the endpoints' failed attempts, opening a circuit at the threshold; with the
        breaker off, close what a circuit was left open with instead."""
        threshold = self.config.circuit_failures
        if not threshold:
            await self.store.circuit_closed(uow, failures, now)
            return
        open_until = now + timedelta(seconds=self.config.circuit_cooldown)
        await self.store.circuit_failed(
            uow, failures, threshold=threshold, open_until=open_until, now=now
        )

    async def _log_exhausted(self, uow: UnitOfWork, dead: _Exhausted) -> None:
        """Emit `message.attempt.exhausted` for a delivery this transaction makes dead."""
        endpoint = self._endpoints.get(dead.endpoint_id)
        if endpoint is None:
            return  # deleted, and its deliveries with it
        item = dead.claim
        data = {
            "object": "delivery",
            "delivery_id": item.id,
            "endpoint_id": endpoint.id,
            "url": endpoint.url,
            "event_id": item.event_id,
            "event_type": item.event_type,
            "attempts": dead.attempts,
            "last_status": dead.last_status,
            "last_error": dead.last_error,
        }
        await emit(uow, endpoint.account_id, ATTEMPT_EXHAUSTED, data)


def _release(counts: Counter[str], key: str) -> None:
    """One request under way fewer for `key`, forgotten at none."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


def _body(item: Claim, payload: str, public_url: str) -> bytes:
    """The serialised event of a claimed delivery, in the endpoint's payload form."""
    return message.stored_body(
        item.event_id,
        item.event_type,
        item.event_created_at,
        item.event_data,
        payload=payload,
        object_url=item.object_url,
        base_url=public_url,
    )
