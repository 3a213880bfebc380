"""The pure-ASGI idempotency middleware (wraps `send`, like Starlette's GZipMiddleware).

Two modes:
- **transactional** (a `SqlRecordStore` on the app's own `Database`): the handler runs inside a
  unit of work the middleware opens, and the record is completed in that same transaction,
  fenced by the lease token. The effect and the stored response commit together or not at all.
- **plain** (any store, e.g. Redis): the handler commits on its own; the response is stored
  afterwards. A crash between the two can re-execute on retry: use transactional mode when the
  business data is in the same database.

The response is buffered (any number of body chunks) and sent only once the record is settled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ustun import clock
from ustun.http.fingerprint import fingerprint
from ustun.http.idempotency_key import HEADER, InvalidIdempotencyKey, parse_idempotency_key
from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.http.retry_after import format_retry_after
from ustun.idempotency.policy import Policy, route_policy
from ustun.idempotency.records import Claimed, Found, Record, State, StoredResponse
from ustun.idempotency.sql import SqlRecordStore
from ustun.idempotency.store import RecordStore
from ustun.store import UnitOfWork

log = logging.getLogger("ustun.idempotency")

DEFAULT_LEASE = 30.0
DEFAULT_TTL = 86_400.0
DEFAULT_MAX_BODY = 1024 * 1024
REPLAY_HEADERS = ("content-type", "location", "etag")
REPLAYED_HEADER = "idempotent-replayed"
# Never stored, as at Stripe: the request was refused before it did anything (validation, rate).
UNSTORED_STATUSES = frozenset({422, 429})
IN_PROGRESS_RETRY_AFTER = 1.0
_HEADER = HEADER.encode()


def account_scope(scope: Scope) -> str:
    """The scope of keys: the id of `scope["state"]["account"]`; "" for a single-tenant app."""
    account = scope.get("state", {}).get("account")
    return str(getattr(account, "id", ""))


class LeaseLost(Exception):
    """Our claim was taken over (our lease expired); the transaction must not commit."""


class _Discard(Exception):
    """Roll the unit of work back: the response must not be stored (5xx, validation)."""


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


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the already-read body, then defers to the real one."""
    pending = True

    async def receive_again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


class IdempotencyMiddleware:
    """Make POST/PATCH under `prefix` safe to retry with an `Idempotency-Key`.

    `default_policy` applies to routes that carry no `idempotency(...)` marker. With
    `transactional=True` the store must be a `SqlRecordStore` on the database the handlers use.
    `store_server_errors` (plain mode) keeps and replays a 5xx as Stripe does; False releases
    the key instead. In transactional mode a 5xx always rolls back and releases.
    """

    def __init__(
        self,
        app: ASGIApp,
        store: RecordStore,
        *,
        transactional: bool = False,
        claim_in_transaction: bool | None = None,
        prefix: str = "/",
        methods: Iterable[str] = ("POST", "PATCH"),
        default_policy: Policy = "optional",
        lease: float = DEFAULT_LEASE,
        ttl: float = DEFAULT_TTL,
        max_body: int = DEFAULT_MAX_BODY,
        replay_headers: Iterable[str] = (),
        store_server_errors: bool = True,
        scope_of: Callable[[Scope], str] = account_scope,
    ) -> None:
        if transactional and not isinstance(store, SqlRecordStore):
            raise TypeError("transactional mode needs a SqlRecordStore on the app's Database")
        self.app = app
        self.store = store
        self.sql = store if transactional and isinstance(store, SqlRecordStore) else None
        # On SQLite every write transaction is serialised anyway, so a claim committed on its
        # own buys nothing: a duplicate waits for the write lock and then sees the completed
        # record. Claiming inside the handler's transaction saves a whole write transaction.
        if claim_in_transaction is None:
            claim_in_transaction = self.sql is not None and self.sql.db.is_sqlite
        self.claim_in_transaction = claim_in_transaction and self.sql is not None
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

    def _policy(self, scope: Scope) -> Policy:
        marked = route_policy(scope)
        if marked is not None:
            return marked
        return self.default_policy if scope["path"].startswith(self.prefix) else "off"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return
        request = _Request(
            scope=self.scope_of(scope),
            key=key.value,
            fingerprint=fingerprint(scope["method"], scope["path"], scope["query_string"], body),
            receive=_replaying(body, receive),
        )
        if self.sql is not None:
            await self._transactional(self.sql, request, scope, send)
        else:
            await self._plain(request, scope, send)

    async def _plain(self, req: _Request, scope: Scope, send: Send) -> None:
        claim = await self.store.claim(
            req.scope, req.key, req.fingerprint, lease=self.lease, ttl=self.ttl
        )
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
            stored = capture.stored(self.replay_headers)
            if not await self.store.complete(
                req.scope, req.key, claim.lease_token, stored, ttl=self.ttl
            ):
                log.warning("key %r: lease lost before the response was stored", req.key)
        else:
            await self.store.release(req.scope, req.key, claim.lease_token)
        await capture.forward(send)

    async def _transactional(
        self, sql: SqlRecordStore, req: _Request, scope: Scope, send: Send
    ) -> None:
        claim: Claimed | Found | None = None
        if not self.claim_in_transaction:
            claim = await sql.claim(
                req.scope, req.key, req.fingerprint, lease=self.lease, ttl=self.ttl
            )
            if isinstance(claim, Found):
                await self._answer_found(claim.record, req, scope, send)
                return
        capture = _Capture(self.max_body)
        try:
            async with sql.db.unit_of_work() as uow:
                if claim is None:
                    claim = await sql.claim_in(
                        uow.conn,
                        req.scope,
                        req.key,
                        req.fingerprint,
                        lease=self.lease,
                        ttl=self.ttl,
                    )
                if isinstance(claim, Claimed):
                    await self._execute(sql, uow, claim, req, scope, capture)
        except _Discard:
            await self._release_after_rollback(sql, req, claim)
        except LeaseLost:
            await self._problem(
                scope,
                send,
                "idempotency-in-progress",
                "Another request took this Idempotency-Key over; nothing was applied by this one.",
                headers={"retry-after": format_retry_after(IN_PROGRESS_RETRY_AFTER)},
            )
            return
        except BaseException:
            await self._release_after_rollback(sql, req, claim)
            raise
        if isinstance(claim, Found):
            await self._answer_found(claim.record, req, scope, send)
            return
        await capture.forward(send)

    async def _execute(
        self,
        sql: SqlRecordStore,
        uow: UnitOfWork,
        claim: Claimed,
        req: _Request,
        scope: Scope,
        capture: _Capture,
    ) -> None:
        """Run the handler inside `uow` and complete the record just before COMMIT."""
        handler = await uow.conn.begin_nested()
        await self.app(scope, req.receive, capture.send)
        status = capture.status
        if not self._storable(status) or status >= 500:
            raise _Discard
        if status >= 400:
            # A refusal must leave no trace but its stored answer.
            await handler.rollback()
        else:
            await handler.commit()
        stored = capture.stored(self.replay_headers)

        async def complete() -> None:
            if not await sql.complete_in(
                uow.conn, req.scope, req.key, claim.lease_token, stored, ttl=self.ttl
            ):
                raise LeaseLost

        uow.before_commit(complete)

    async def _release_after_rollback(
        self, sql: SqlRecordStore, req: _Request, claim: Claimed | Found | None
    ) -> None:
        # A claim made inside the rolled-back transaction vanished with it.
        if isinstance(claim, Claimed) and not self.claim_in_transaction:
            await sql.release(req.scope, req.key, claim.lease_token)

    def _storable(self, status: int) -> bool:
        return status not in UNSTORED_STATUSES

    async def _answer_found(self, record: Record, req: _Request, scope: Scope, send: Send) -> None:
        if record.fingerprint != req.fingerprint:
            await self._problem(
                scope,
                send,
                "idempotency-key-reused",
                "This Idempotency-Key was used for a different request (method, path or body).",
            )
        elif record.state is State.IN_PROGRESS or record.response is None:
            wait = (record.locked_until - clock.now()) / timedelta(seconds=1)
            await self._problem(
                scope,
                send,
                "idempotency-in-progress",
                "A request with this Idempotency-Key is still being processed.",
                headers={
                    "retry-after": format_retry_after(max(0.0, min(wait, IN_PROGRESS_RETRY_AFTER)))
                },
            )
        elif record.response.body is None:
            headers = {n: v for n, v in record.response.headers if n.lower() == "location"}
            await self._problem(
                scope,
                send,
                "idempotency-response-unavailable",
                f"The request with this Idempotency-Key completed with status "
                f"{record.response.status}, but its response exceeded the {self.max_body}-byte "
                "replay limit and was not kept.",
                headers=headers,
                original_status=record.response.status,
            )
        else:
            await _replay(record.response, send)

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
            base=str(Request(scope).base_url),
            instance=f"urn:ustun:request:{request_id}" if request_id else None,
            **extensions,
        )
        body = encode(document)
        raw = [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", b"%d" % len(body))]
        raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": document["status"], "headers": raw})
        await send({"type": "http.response.body", "body": body})


async def _replay(response: StoredResponse, send: Send) -> None:
    assert response.body is not None
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in response.headers]
    headers.append((b"content-length", b"%d" % len(response.body)))
    headers.append((REPLAYED_HEADER.encode(), b"true"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


class _Request:
    """What the middleware knows about one keyed request."""

    __slots__ = ("fingerprint", "key", "receive", "scope")

    def __init__(self, *, scope: str, key: str, fingerprint: str, receive: Receive) -> None:
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
        self.receive = receive
