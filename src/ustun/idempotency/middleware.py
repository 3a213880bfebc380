"""The pure-ASGI idempotency middleware (wraps `send`, like Starlette's GZipMiddleware).

What to do with a request (run, replay, refuse) is decided by `decision`, without I/O; this
module reads the request, asks the store (the port of `store`) and sends the answer.

Two modes:
- **transactional** (a store with a transactional half, such as `SqlRecordStore` on the app's
  own `Database`): the handler's unit of work is held open by the middleware (`store.hold()`),
  and the record is written in that same transaction just before COMMIT: fenced by the lease
  token of a claim committed first, or settled by an upsert that only takes a free key (held
  meanwhile where the store can: PostgreSQL's advisory lock, taken by `store.look` as the
  transaction's first statement). The effect and the stored response commit
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

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun import clock, tracing
from ustun.defaults import (
    DEFAULT_IDEMPOTENCY_LEASE,
    DEFAULT_IDEMPOTENCY_MAX_BODY,
    DEFAULT_IDEMPOTENCY_TTL,
)
from ustun.errors import LeaseLost, UstunError
from ustun.http.fingerprint import fingerprint
from ustun.http.idempotency_key import HEADER
from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.idempotency.decision import (
    LEASE_LOST,
    Full,
    Keep,
    Refuse,
    Replay,
    Request,
    Run,
    count,
    found,
    keep_plain,
    keep_transactional,
    key_of,
    not_claimed,
    on_lookup,
    over_quota,
    unavailable,
)
from ustun.idempotency.policy import Policy, route_policy
from ustun.idempotency.records import Claimed, StoredResponse
from ustun.idempotency.sealing import Sealer, kept, opened
from ustun.idempotency.store import RecordStore, TransactionalRecordStore
from ustun.store import UnitOfWork

log = logging.getLogger("ustun.idempotency")

REPLAY_HEADERS = ("content-type", "location", "etag", "last-modified", "cache-control")
REPLAYED_HEADER = "idempotent-replayed"
# The span of a keyed request's decision and run (`ustun.tracing`); `count` sets its outcome.
SPAN = "ustun.idempotency"
_HEADER = HEADER.encode()


def account_scope(scope: Scope) -> str:
    """The scope of keys: the id of `scope["state"]["account"]`; "" for a single-tenant app."""
    account = scope.get("state", {}).get("account")
    return str(getattr(account, "id", ""))


class _Discard(Exception):
    """Roll the handler's writes back: it refused (4xx) or failed (5xx)."""

    def __init__(self, keep: Keep) -> None:
        super().__init__(f"the handler's writes are rolled back ({keep})")
        self.keep = keep


class _Answer(Exception):
    """Roll back and answer as decided: the key is another request's, or its scope is full."""

    def __init__(self, decision: Replay | Refuse | Full) -> None:
        super().__init__("the request is answered without its own effect")
        self.decision = decision


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

    `default_policy` applies to routes that carry no `idempotency(...)` marker. `policy_of`
    reads a route's policy from the request's scope (None: unmarked, "off": no route); by
    default the marker of the Starlette/FastAPI route it matches. With
    `transactional=True` the store must have a transactional half (`store.transactional`, as
    `SqlRecordStore` on the database the handlers use has).
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
        max_body: int = DEFAULT_IDEMPOTENCY_MAX_BODY,
        replay_headers: Iterable[str] = (),
        store_server_errors: bool = True,
        scope_of: Callable[[Scope], str] = account_scope,
        policy_of: Callable[[Scope], Policy | None] = route_policy,
        sealer: Sealer | None = None,
        fingerprint_key: bytes | None = None,
        previous_fingerprint_key: bytes | None = None,
        problem_base: str = "",
    ) -> None:
        self.tx: TransactionalRecordStore | None = store.transactional if transactional else None
        if transactional and self.tx is None:
            raise TypeError(
                "transactional mode needs a store in the app's own database "
                "(a SqlRecordStore on the app's Database)"
            )
        self.app = app
        self.store = store
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
        self.policy_of = policy_of
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
        marked = self.policy_of(scope)
        if marked is not None:
            return marked
        return self.default_policy if scope["path"].startswith(self.prefix) else "off"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if tracing.ENABLED and scope["type"] == "http":
            # The request's server span, or the app's own (its instrumentation ran first).
            await tracing.asgi(self._handle, scope, receive, send)
            return
        await self._handle(scope, receive, send)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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
        key = key_of(
            values, required=policy == "required", method=scope["method"], path=scope["path"]
        )
        if isinstance(key, Refuse):
            await self._refuse(key, scope, send)
            return
        if key is None:
            if self.tx is not None:
                await self._unkeyed(self.tx, scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        if not self._prepared:
            await self._prepare()
        body = await _read_body(receive)
        if body is None:
            return
        request = Request(
            scope=self.scope_of(scope),
            key=key,
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"],
            body=body,
            fingerprint=fingerprint(
                scope["method"],
                scope["path"],
                scope["query_string"],
                body,
                key=self.fingerprint_key,
            ),
            keys=self._fingerprint_keys,
        )
        receive = _replaying({"type": "http.request", "body": body, "more_body": False}, receive)
        with tracing.span(SPAN):
            if self.tx is not None:
                await self._transactional(self.tx, request, scope, receive, send)
            else:
                await self._plain(request, scope, receive, send)

    async def _plain(self, req: Request, scope: Scope, receive: Receive, send: Send) -> None:
        claim = await self.store.claim(
            req.scope, req.key, req.fingerprint, lease=self.lease, ttl=self.ttl
        )
        if not isinstance(claim, Claimed):
            await self._answer(not_claimed(claim, req, clock.now()), req, scope, send)
            return
        capture = _Capture(self.max_body)
        try:
            await self.app(scope, receive, capture.send)
            status = capture.status
        except BaseException:
            await self.store.release(req.scope, req.key, claim.lease_token)
            raise
        if keep_plain(status, store_server_errors=self.store_server_errors) is Keep.STORE:
            stored = self._stored(capture, req)
            if not await self.store.complete(
                req.scope, req.key, claim.lease_token, stored, ttl=self.ttl
            ):
                log.warning("key %r: lease lost before the response was stored", req.key)
        else:
            await self.store.release(req.scope, req.key, claim.lease_token)
        count("executed")
        await capture.forward(send)

    async def _unkeyed(
        self, tx: TransactionalRecordStore, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request without a key: held as a keyed one is, with nothing to record."""
        capture = _Capture(self.max_body)
        try:
            async with tx.hold():
                await self.app(scope, receive, capture.send)
                keep = keep_transactional(capture.status)
                if keep is not Keep.COMMIT:
                    raise _Discard(keep)
        except _Discard:
            pass
        await capture.forward(send)

    async def _transactional(
        self, tx: TransactionalRecordStore, req: Request, scope: Scope, receive: Receive, send: Send
    ) -> None:
        claim = None
        if self.claim_first:
            first = await tx.claim(
                req.scope, req.key, req.fingerprint, lease=self.lease, ttl=self.ttl
            )
            if not isinstance(first, Claimed):
                await self._answer(not_claimed(first, req, clock.now()), req, scope, send)
                return
            claim = first
        capture = _Capture(self.max_body)
        try:
            # The handler's own unit of work joins the held one; it commits at the end of this
            # block, with the record completed in it, or not at all.
            async with tx.hold() as held:
                if claim is None:
                    decision = on_lookup(await tx.look(held, req.scope, req.key), req, clock.now())
                    if not isinstance(decision, Run):
                        raise _Answer(decision)
                await self.app(scope, receive, capture.send)
                keep = keep_transactional(capture.status)
                if keep is not Keep.COMMIT:
                    raise _Discard(keep)
                uow = await held.begin()
                stored = self._stored(capture, req)
                uow.before_commit(self._completion(tx, uow, req, claim, stored))
        except _Discard as discard:
            taken = await self._after_refusal(tx, req, claim, capture, discard.keep)
            if taken is not None:
                await self._answer(taken, req, scope, send)
                return
        except LeaseLost:
            await self._refuse(LEASE_LOST, scope, send)
            return
        except _Answer as answer:
            decision = answer.decision
            if isinstance(decision, Full):
                decision = over_quota(await tx.over_quota(req.scope))
            await self._answer(decision, req, scope, send)
            return
        except Exception:
            if claim is not None:
                await tx.release(req.scope, req.key, claim.lease_token)
                raise
            # Unclaimed, the handler may have failed only because the key's first request
            # already did its work (a unique constraint, say): then that request's answer stands.
            settled = await tx.read(req.scope, req.key)
            if settled is None:
                raise
            await self._answer(found(settled, req, clock.now()), req, scope, send)
            return
        except BaseException:
            if claim is not None:
                await tx.release(req.scope, req.key, claim.lease_token)
            raise
        count("executed")
        await capture.forward(send)

    def _completion(
        self,
        tx: TransactionalRecordStore,
        uow: UnitOfWork,
        req: Request,
        claim: Claimed | None,
        stored: StoredResponse,
    ) -> Callable[[], Awaitable[None]]:
        """The before-commit hook that completes the record in the handler's transaction."""

        async def complete() -> None:
            if claim is not None:
                if not await tx.complete_in(
                    uow, req.scope, req.key, claim.lease_token, stored, ttl=self.ttl
                ):
                    raise LeaseLost
                return
            taken = await tx.settle_in(
                uow, req.scope, req.key, req.fingerprint, stored, ttl=self.ttl
            )
            if taken is not None:
                raise _Answer(found(taken, req, clock.now()))

        return complete

    async def _after_refusal(
        self,
        tx: TransactionalRecordStore,
        req: Request,
        claim: Claimed | None,
        capture: _Capture,
        keep: Keep,
    ) -> Replay | Refuse | None:
        """The handler's writes are rolled back: keep a 4xx answer, release the key otherwise.

        Returns the answer of a request that settled the key first, if one did.
        """
        if keep is Keep.RELEASE:
            if claim is not None:
                await tx.release(req.scope, req.key, claim.lease_token)
            return None
        stored = self._stored(capture, req)
        if claim is None:
            taken = await tx.settle(req.scope, req.key, req.fingerprint, stored, ttl=self.ttl)
            return None if taken is None else found(taken, req, clock.now())
        if not await tx.complete(req.scope, req.key, claim.lease_token, stored, ttl=self.ttl):
            log.warning("key %r: lease lost before the response was stored", req.key)
        return None

    def _stored(self, capture: _Capture, req: Request) -> StoredResponse:
        """What to keep of the captured response (see `sealing.kept`)."""
        stored = capture.stored(self.replay_headers)
        return kept(stored, self.sealer, scope=req.scope, key=req.key)

    async def _answer(
        self, decision: Replay | Refuse, req: Request, scope: Scope, send: Send
    ) -> None:
        """Replay the stored answer (its body unsealed), or refuse."""
        if isinstance(decision, Replay):
            response = decision.response
            body = opened(response, self.sealer, scope=req.scope, key=req.key)
            if body is not None:
                count("replayed")
                await _replay(response, body, send)
                return
            decision = unavailable(response, sealer=self.sealer is not None, max_body=self.max_body)
        await self._refuse(decision, scope, send)

    async def _refuse(self, refusal: Refuse, scope: Scope, send: Send) -> None:
        """The refusal's problem, its outcome counted."""
        if refusal.outcome is not None:
            count(refusal.outcome)
        await self._problem(
            scope,
            send,
            refusal.slug,
            refusal.detail,
            headers=refusal.headers,
            **dict(refusal.extensions),
        )

    async def _problem(
        self,
        scope: Scope,
        send: Send,
        slug: str,
        detail: str,
        *,
        headers: tuple[tuple[str, str], ...] = (),
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
        raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        await send({"type": "http.response.start", "status": document["status"], "headers": raw})
        await send({"type": "http.response.body", "body": body})


async def _replay(response: StoredResponse, body: bytes, send: Send) -> None:
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in response.headers]
    headers.append((b"content-length", b"%d" % len(body)))
    headers.append((REPLAYED_HEADER.encode(), b"true"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
