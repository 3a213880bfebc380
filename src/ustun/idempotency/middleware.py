"""The pure-ASGI idempotency middleware (wraps `send`, like Starlette's GZipMiddleware).

Two modes:
- **transactional** (a `SqlRecordStore` on the app's own `Database`): the handler's unit of
  work is held open by the middleware (`Database.hold()`), and the record is written in that
  same transaction just before COMMIT: fenced by the lease token of a claim committed first, or
  settled by an upsert that only takes a free key (on PostgreSQL held meanwhile by an advisory
  lock taken as the transaction's first statement). The effect and the stored response commit
  together or not at all. A request without a key (on an `optional` route) is held the same
  way: its writes commit with a 2xx/3xx answer and roll back on a 4xx, a 5xx or an exception.
- **plain** (any store, e.g. Redis): the handler commits on its own; the response is stored
  afterwards. A crash between the two can re-execute on retry: use transactional mode when the
  business data is in the same database.

The response is buffered (any number of body chunks) and sent only once the record is settled.
A body marked `Cache-Control: no-store` is stored sealed by the app's `Sealer` (see `sealing`).
With a `fingerprint_key` the stored request fingerprints are keyed hashes (HMAC-SHA256), so a
secret inside a body cannot be confirmed from the store by anyone without the key.
The `type` of its problems is `<problem_base>/problems/<slug>`: relative by default.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, TypeGuard

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun import clock, instrumentation
from ustun.defaults import DEFAULT_IDEMPOTENCY_LEASE, DEFAULT_IDEMPOTENCY_TTL
from ustun.errors import InvalidIdempotencyKey, LeaseLost, UstunError
from ustun.http.fingerprint import fingerprint, matches
from ustun.http.idempotency_key import HEADER, parse_idempotency_key
from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.http.retry_after import format_retry_after
from ustun.idempotency.policy import Policy, route_policy
from ustun.idempotency.records import Claimed, Found, OverQuota, Record, State, StoredResponse
from ustun.idempotency.sealing import Sealer, context, forbids_storing
from ustun.idempotency.sql import SqlRecordStore
from ustun.idempotency.store import RecordStore
from ustun.store import UnitOfWork

log = logging.getLogger("ustun.idempotency")

DEFAULT_MAX_BODY = 1024 * 1024
REPLAY_HEADERS = ("content-type", "location", "etag", "last-modified", "cache-control")
REPLAYED_HEADER = "idempotent-replayed"
# Never stored, as at Stripe: the request was refused before it did anything (an unreadable
# body or one of another media type, validation, a failed or missing precondition, rate
# limiting), so a corrected retry may use the same key.
UNSTORED_STATUSES = frozenset({400, 412, 415, 422, 428, 429})
IN_PROGRESS_RETRY_AFTER = 1.0
_STILL_RUNNING = "A request with this Idempotency-Key is still being processed."
_HEADER = HEADER.encode()


def account_scope(scope: Scope) -> str:
    """The scope of keys: the id of `scope["state"]["account"]`; "" for a single-tenant app."""
    account = scope.get("state", {}).get("account")
    return str(getattr(account, "id", ""))


class _Discard(Exception):
    """Roll the handler's writes back: it refused (4xx) or failed (5xx)."""


class _Busy(Exception):
    """Another transaction holds the key (PostgreSQL's advisory lock): answer 409 at once."""


class _Full(Exception):
    """The scope's stored answers are at their quota: refuse this new key, roll back, 429."""


class _Taken(Exception):
    """Another request settled the key first; roll back and answer with its record."""

    def __init__(self, record: Record) -> None:
        super().__init__("idempotency key settled by another request")
        self.record = record


class _Capture:
    """A `send` that buffers the response instead of sending it."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.start: Message | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            self.chunks.append(body)
            self.size += len(body)
            self.complete = not message.get("more_body", False)

    @property
    def status(self) -> int:
        if self.start is None or not self.complete:
            raise RuntimeError("the application returned without a complete response")
        status: int = self.start["status"]
        return status

    def stored(self, allowed: frozenset[bytes]) -> StoredResponse:
        assert self.start is not None
        headers = tuple(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self.start.get("headers", ())
            if name.lower() in allowed
        )
        body = b"".join(self.chunks) if self.size <= self.max_body else None
        return StoredResponse(self.status, headers, body)

    async def forward(self, send: Send) -> None:
        assert self.start is not None
        await send(self.start)
        await send({"type": "http.response.body", "body": b"".join(self.chunks)})


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client went away first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(first: Message, receive: Receive) -> Receive:
    """A `receive` that hands the app the already-read message, then defers to the real one."""
    pending = True

    async def receive_again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return first
        return await receive()

    return receive_again


class IdempotencyMiddleware:
    """Make POST/PATCH under `prefix` safe to retry with an `Idempotency-Key`.

    `default_policy` applies to routes that carry no `idempotency(...)` marker. With
    `transactional=True` the store must be a `SqlRecordStore` on the database the handlers use.
    `store_server_errors` (plain mode) keeps and replays a 5xx as Stripe does; False releases
    the key instead. In transactional mode a 5xx always rolls back and releases.
    `sealer` encrypts the stored body of a `Cache-Control: no-store` response; without one,
    such a body is not kept and its replay answers 409 `idempotency-response-unavailable`.
    `fingerprint_key` (secret bytes kept out of the store) keys the request fingerprints it
    stores; without one they are plain SHA-256 of the request, and whoever reads the store can
    test a guess of a body (a password in it) against them. `previous_fingerprint_key` (during
    a key rotation) still checks the fingerprints stored under it; a fingerprint stored
    unkeyed, before the key was set, still matches its request until it expires. One made
    under a key given neither way cannot be checked: its key's retry replays (never runs twice),
    whatever the request.
    The store is prepared (its table checked or created) once: at the app's lifespan startup,
    which fails with the one-line `UstunError` on a missing table, or else on the first request.
    `problem_base` (an absolute URL, say the app's public one) prefixes the `type` of the
    problems it answers; by default it is the relative `/problems/<slug>`.
    """

    def __init__(
        self,
        app: ASGIApp,
        store: RecordStore,
        *,
        transactional: bool = False,
        claim_first: bool = False,
        prefix: str = "/",
        methods: Iterable[str] = ("POST", "PATCH"),
        default_policy: Policy = "optional",
        lease: float = DEFAULT_IDEMPOTENCY_LEASE,
        ttl: float = DEFAULT_IDEMPOTENCY_TTL,
        max_body: int = DEFAULT_MAX_BODY,
        replay_headers: Iterable[str] = (),
        store_server_errors: bool = True,
        scope_of: Callable[[Scope], str] = account_scope,
        sealer: Sealer | None = None,
        fingerprint_key: bytes | None = None,
        previous_fingerprint_key: bytes | None = None,
        problem_base: str = "",
    ) -> None:
        if transactional and not isinstance(store, SqlRecordStore):
            raise TypeError("transactional mode needs a SqlRecordStore on the app's Database")
        self.app = app
        self.store = store
        self.sql = store if transactional and isinstance(store, SqlRecordStore) else None
        # Transactional mode either claims first, in a transaction of its own (so concurrent
        # duplicates see the claim and get 409), or (the default) writes the record once, at commit,
        # in the handler's transaction ("settle"), which saves a whole write transaction per
        # request. A retry of a settled key is answered from a read of the record, so the handler
        # does not run again. On PostgreSQL the handler's transaction first takes the key's advisory
        # lock with that read, so a concurrent duplicate gets 409 at once, as after a claim; a crash
        # rolls back and frees the key with the session. On SQLite, whose writers queue anyway, only
        # duplicates racing the first request run the handler; their transaction finds the record at
        # commit, rolls back, and the stored answer is sent: the effect still happens once.
        self.claim_first = claim_first
        self.prefix = prefix
        self.methods = frozenset(m.upper() for m in methods)
        self.default_policy = default_policy
        self.lease = lease
        self.ttl = ttl
        self.max_body = max_body
        self.replay_headers = frozenset(
            h.lower().encode("latin-1") for h in (*REPLAY_HEADERS, *replay_headers)
        )
        self.store_server_errors = store_server_errors
        self.scope_of = scope_of
        self.sealer = sealer
        self.fingerprint_key = fingerprint_key
        self._fingerprint_keys = tuple(
            k for k in (fingerprint_key, previous_fingerprint_key) if k is not None
        )
        self.problem_base = problem_base
        self._prepared = False

    async def _prepare(self) -> None:
        await self.store.prepare()
        self._prepared = True

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Prepare the store before the app starts; a failure stops the server with its line."""
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await self._prepare()
            except UstunError as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
        await self.app(scope, _replaying(message, receive), send)

    def _policy(self, scope: Scope) -> Policy:
        marked = route_policy(scope)
        if marked is not None:
            return marked
        return self.default_policy if scope["path"].startswith(self.prefix) else "off"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] not in self.methods:
            await self.app(scope, receive, send)
            return
        policy = self._policy(scope)
        if policy == "off":
            await self.app(scope, receive, send)
            return
        values = [v.decode("latin-1") for k, v in scope["headers"] if k == _HEADER]
        try:
            key = parse_idempotency_key(values)
        except InvalidIdempotencyKey as exc:
            await self._problem(scope, send, exc.slug, exc.detail)
            return
        if key is None:
            if policy == "required":
                await self._problem(
                    scope,
                    send,
                    "idempotency-key-missing",
                    f"{scope['method']} {scope['path']} requires an Idempotency-Key header.",
                )
                return
            if self.sql is not None:
                await self._unkeyed(self.sql, scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        if not self._prepared:
            await self._prepare()
        body = await _read_body(receive)
        if body is None:
            return
        request = _Request(
            scope=self.scope_of(scope),
            key=key.value,
            fingerprint=fingerprint(
                scope["method"],
                scope["path"],
                scope["query_string"],
                body,
                key=self.fingerprint_key,
            ),
            body=body,
            receive=_replaying({"type": "http.request", "body": body, "more_body": False}, receive),
        )
        if self.sql is not None:
            await self._transactional(self.sql, request, scope, send)
        else:
            await self._plain(request, scope, send)

    async def _plain(self, req: _Request, scope: Scope, send: Send) -> None:
        claim = await self.store.claim(
            req.scope, req.key, req.fingerprint, lease=self.lease, ttl=self.ttl
        )
        if isinstance(claim, OverQuota):
            await self._over_quota(claim, scope, send)
            return
        if isinstance(claim, Found):
            await self._answer_found(claim.record, req, scope, send)
            return
        capture = _Capture(self.max_body)
        try:
            await self.app(scope, req.receive, capture.send)
            status = capture.status
        except BaseException:
            await self.store.release(req.scope, req.key, claim.lease_token)
            raise
        if self._storable(status) and (status < 500 or self.store_server_errors):
            stored = self._stored(capture, req)
            if not await self.store.complete(
                req.scope, req.key, claim.lease_token, stored, ttl=self.ttl
            ):
                log.warning("key %r: lease lost before the response was stored", req.key)
        else:
            await self.store.release(req.scope, req.key, claim.lease_token)
        _count("executed")
        await capture.forward(send)

    async def _unkeyed(
        self, sql: SqlRecordStore, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request without a key: held as a keyed one is, with nothing to record."""
        capture = _Capture(self.max_body)
        try:
            async with sql.db.hold():
                await self.app(scope, receive, capture.send)
                if capture.status >= 400:
                    raise _Discard
        except _Discard:
            pass
        await capture.forward(send)

    async def _transactional(
        self, sql: SqlRecordStore, req: _Request, scope: Scope, send: Send
    ) -> None:
        claim = None
        if not self.claim_first:
            if not sql.can_lock:
                settled, full = await sql.read_checked(req.scope, req.key)
                if _live(settled):
                    await self._answer_found(settled, req, scope, send)
                    return
                if full:
                    await self._over_quota(await sql.over_quota(req.scope), scope, send)
                    return
        else:
            first = await sql.claim(
                req.scope, req.key, req.fingerprint, lease=self.lease, ttl=self.ttl
            )
            if isinstance(first, OverQuota):
                await self._over_quota(first, scope, send)
                return
            if isinstance(first, Found):
                await self._answer_found(first.record, req, scope, send)
                return
            claim = first
        capture = _Capture(self.max_body)
        try:
            # The handler's own unit of work joins the held one; it commits at the end of this
            # block, with the record completed in it, or not at all.
            async with sql.db.hold() as held:
                if claim is None and sql.can_lock:
                    held_key, found, full = await sql.lock_in(
                        (await held.begin()).conn, req.scope, req.key
                    )
                    if not held_key:
                        raise _Busy
                    if _live(found):
                        raise _Taken(found)
                    if full:
                        raise _Full
                await self.app(scope, req.receive, capture.send)
                if capture.status >= 400 or not self._storable(capture.status):
                    raise _Discard
                uow = await held.begin()
                stored = self._stored(capture, req)
                uow.before_commit(self._completion(sql, uow, req, claim, stored))
        except _Discard:
            taken = await self._after_refusal(sql, req, claim, capture)
            if taken is not None:
                await self._answer_found(taken, req, scope, send)
                return
        except LeaseLost:
            await self._in_progress(
                scope,
                send,
                "Another request took this Idempotency-Key over; nothing was applied by this one.",
                IN_PROGRESS_RETRY_AFTER,
            )
            return
        except _Busy:
            await self._in_progress(scope, send, _STILL_RUNNING, IN_PROGRESS_RETRY_AFTER)
            return
        except _Full:
            await self._over_quota(await sql.over_quota(req.scope), scope, send)
            return
        except _Taken as taken:
            await self._answer_found(taken.record, req, scope, send)
            return
        except Exception:
            if claim is not None:
                await sql.release(req.scope, req.key, claim.lease_token)
                raise
            # Unclaimed, the handler may have failed only because the key's first request
            # already did its work (a unique constraint, say): then that request's answer stands.
            settled = await sql.read(req.scope, req.key)
            if settled is None:
                raise
            await self._answer_found(settled, req, scope, send)
            return
        except BaseException:
            if claim is not None:
                await sql.release(req.scope, req.key, claim.lease_token)
            raise
        _count("executed")
        await capture.forward(send)

    def _completion(
        self,
        sql: SqlRecordStore,
        uow: UnitOfWork,
        req: _Request,
        claim: Claimed | None,
        stored: StoredResponse,
    ) -> Callable[[], Awaitable[None]]:
        """The before-commit hook that completes the record in the handler's transaction."""

        async def complete() -> None:
            if claim is not None:
                if not await sql.complete_in(
                    uow.conn, req.scope, req.key, claim.lease_token, stored, ttl=self.ttl
                ):
                    raise LeaseLost
                return
            taken = await sql.settle_in(
                uow.conn, req.scope, req.key, req.fingerprint, stored, ttl=self.ttl
            )
            if taken is not None:
                raise _Taken(taken)

        return complete

    async def _after_refusal(
        self, sql: SqlRecordStore, req: _Request, claim: Claimed | None, capture: _Capture
    ) -> Record | None:
        """The handler's writes are rolled back: keep a 4xx answer, release the key otherwise.

        Returns the record of a request that settled the key first, if one did.
        """
        status = capture.status
        if not self._storable(status) or status >= 500:
            if claim is not None:
                await sql.release(req.scope, req.key, claim.lease_token)
            return None
        stored = self._stored(capture, req)
        if claim is None:
            return await sql.settle(req.scope, req.key, req.fingerprint, stored, ttl=self.ttl)
        if not await sql.complete(req.scope, req.key, claim.lease_token, stored, ttl=self.ttl):
            log.warning("key %r: lease lost before the response was stored", req.key)
        return None

    def _storable(self, status: int) -> bool:
        return status not in UNSTORED_STATUSES

    def _stored(self, capture: _Capture, req: _Request) -> StoredResponse:
        """What to keep of the captured response: a `no-store` body only sealed, if at all."""
        stored = capture.stored(self.replay_headers)
        if stored.body is None or not forbids_storing(stored.headers):
            return stored
        if self.sealer is None:
            return dataclasses.replace(stored, body=None)
        sealed = self.sealer.seal_bytes(stored.body, context=context(req.scope, req.key))
        return dataclasses.replace(stored, body=sealed)

    def _opened(self, response: StoredResponse, req: _Request) -> bytes | None:
        """The body to replay (unsealed), or None when it was not kept."""
        if response.body is None or not forbids_storing(response.headers):
            return response.body
        if self.sealer is None:
            return None
        return self.sealer.open_bytes(response.body, context=context(req.scope, req.key))

    async def _answer_found(self, record: Record, req: _Request, scope: Scope, send: Send) -> None:
        if not self._same_request(record.fingerprint, req, scope):
            _count("reused")
            await self._problem(
                scope,
                send,
                "idempotency-key-reused",
                "This Idempotency-Key was used for a different request (method, path or body).",
            )
        elif record.state is State.IN_PROGRESS or record.response is None:
            wait = (record.locked_until - clock.now()) / timedelta(seconds=1)
            await self._in_progress(
                scope, send, _STILL_RUNNING, max(0.0, min(wait, IN_PROGRESS_RETRY_AFTER))
            )
        elif (body := self._opened(record.response, req)) is None:
            _count("replayed")
            response = record.response
            why = (
                "was marked Cache-Control: no-store and this server has no key to keep it sealed"
                if self.sealer is None and forbids_storing(response.headers)
                else f"exceeded the {self.max_body}-byte replay limit"
            )
            await self._problem(
                scope,
                send,
                "idempotency-response-unavailable",
                f"The request with this Idempotency-Key completed with status {response.status}, "
                f"but its response {why} and was not kept.",
                headers={n: v for n, v in response.headers if n.lower() == "location"},
                original_status=response.status,
            )
        else:
            _count("replayed")
            await _replay(record.response, body, send)

    def _same_request(self, stored: str, req: _Request, scope: Scope) -> bool:
        """Whether a stored fingerprint is this request's: made now, or under an older key.

        One made under a key this process no longer has (rotated away) is taken to match: its
        request cannot be told from another, and a replay never applies anything twice.
        """
        if stored == req.fingerprint:
            return True
        same = matches(
            stored,
            scope["method"],
            scope["path"],
            scope["query_string"],
            req.body,
            keys=self._fingerprint_keys,
        )
        return same is not False

    async def _in_progress(self, scope: Scope, send: Send, detail: str, wait: float) -> None:
        """409 `idempotency-in-progress`, retry after `wait` seconds."""
        _count("in-progress")
        await self._problem(
            scope,
            send,
            "idempotency-in-progress",
            detail,
            headers={"retry-after": format_retry_after(wait)},
        )

    async def _over_quota(self, refusal: OverQuota, scope: Scope, send: Send) -> None:
        """429 `quota-exceeded`: nothing ran; retry once enough stored answers have expired."""
        _count("over-quota")
        await self._problem(
            scope,
            send,
            "quota-exceeded",
            f"The answers stored for this account's Idempotency-Keys hold {refusal.limit} bytes "
            "or more, its limit: a request with a new key runs once some of them have expired "
            "(keys already used still replay). Nothing was applied.",
            headers={"retry-after": format_retry_after(refusal.retry_after)},
            limit=refusal.limit,
        )

    async def _problem(
        self,
        scope: Scope,
        send: Send,
        slug: str,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        state = scope.get("state", {})
        request_id = state.get("request_id")
        document = problem(
            slug,
            detail,
            base=self.problem_base,
            instance=f"urn:ustun:request:{request_id}" if request_id else None,
            **extensions,
        )
        body = encode(document)
        raw = [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", b"%d" % len(body))]
        raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": document["status"], "headers": raw})
        await send({"type": "http.response.body", "body": body})


def _live(record: Record | None) -> TypeGuard[Record]:
    """Whether `record` answers the key: completed, or claimed by a request whose lease runs.

    A claim whose lease ran out belongs to a dead request: settling takes it over.
    """
    return record is not None and record.answers(clock.now())


def _count(outcome: str) -> None:
    """Report an outcome (executed, replayed, in-progress, reused, over-quota) to
    instrumentation hooks."""
    instrumentation.emit("idempotency", outcome=outcome)


async def _replay(response: StoredResponse, body: bytes, send: Send) -> None:
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in response.headers]
    headers.append((b"content-length", b"%d" % len(body)))
    headers.append((REPLAYED_HEADER.encode(), b"true"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Request:
    """What the middleware knows about one keyed request."""

    __slots__ = ("body", "fingerprint", "key", "receive", "scope")

    def __init__(
        self, *, scope: str, key: str, fingerprint: str, body: bytes, receive: Receive
    ) -> None:
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
        self.body = body
        self.receive = receive
