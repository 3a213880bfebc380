"""`IdempotencyMiddleware` for any WSGI app, in plain mode: the app commits its own writes, and
the answer is stored after it ran.

The key is claimed first, committed on its own: in a database (`idempotency.sql`'s plans on a
synchronous connection) or in Redis (the async store's keys and Lua scripts on the blocking
client). A concurrent duplicate finds the claim and gets 409, a retry of a finished request
gets the stored answer with `Idempotent-Replayed: true`, the same key on another request 422.
The app's answer is buffered, stored (or the key released, after an exception, a refusal a
retry may correct, or with `store_server_errors=False` a 5xx), then sent. The same decisions
(`idempotency.decision`) and records as the ASGI middleware's plain mode; a crash between the
app's commit and the stored answer can run a retry again (a Flask app on SQLAlchemy has
`ustun.flask.idempotent`, which commits both together).

    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, "postgresql://app@db/app")
    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, "redis://cache:6379/0")

A database holds ustun's tables (`ustun migrate` with `USTUN_DATABASE_URL` pointing at it);
Redis needs nothing prepared. A store out of reach when the key is claimed (Redis's connection
errors; a database's outages as `ustun.store.reach.outage` knows them) is answered 503
(`database-unavailable`, Retry-After) and nothing runs.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from ustun import clock, tracing
from ustun.defaults import (
    DEFAULT_IDEMPOTENCY_LEASE,
    DEFAULT_IDEMPOTENCY_MAX_BODY,
    DEFAULT_IDEMPOTENCY_TTL,
    DEFAULT_REDIS_PREFIX,
)
from ustun.errors import ConfigError
from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.http.retry_after import format_retry_after
from ustun.idempotency.decision import (
    Keep,
    Refuse,
    Replay,
    count,
    keep_plain,
    key_of,
    not_claimed,
    unavailable,
)
from ustun.idempotency.decision import Request as KeyedRequest
from ustun.idempotency.hosted import keyed_request
from ustun.idempotency.middleware import REPLAY_HEADERS, REPLAYED_HEADER
from ustun.idempotency.records import Claim, Claimed, Found, StoredResponse
from ustun.idempotency.sealing import Sealer, kept, opened
from ustun.idempotency.sql import claim_key, complete_key, release_key
from ustun.store.dbapi import begin_immediate, sqlalchemy_connection
from ustun.store.plans import Plan, run_sync
from ustun.store.reach import OUTAGE_PROBLEMS, Outage, outage

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from ustun.idempotency.redis_store import SyncRedis

log = logging.getLogger("ustun.idempotency")
T = TypeVar("T")
Scope = Callable[["WSGIEnvironment"], str]
_HEADER = "HTTP_IDEMPOTENCY_KEY"
# The URL schemes of redis-py's `from_url`: a URL of another names a database.
_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})


@runtime_checkable
class SyncRecordStore(Protocol):
    """The records of a WSGI middleware, each call committed on its own (plain mode):
    `SqlRecords` in a database, `ustun.idempotency.redis_store.SyncRedisRecordStore` in Redis."""

    def claim(self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Hold the key as in progress (or take over an expired lease), or return what is there."""
        ...

    def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response if the lease is still ours; False when it was lost."""
        ...

    def release(self, scope: str, key: str, lease_token: str) -> None:
        """Forget the claim (if still ours) so that a retry executes afresh."""
        ...

    def outage(self, exc: BaseException) -> Outage | None:
        """What an error this store raised says about it (unreachable, too slow, full), or None
        for any other error."""
        ...


class SqlRecords:
    """Records in a database of ustun's schema through a SQLAlchemy `engine` on sqlite3 or
    psycopg: `idempotency.sql`'s plans, each in a transaction of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim in a transaction of its own, committed at once so duplicates see it."""
        claimed = self._run(
            claim_key(scope, key, fingerprint, lease=lease, ttl=ttl, max_bytes=None)
        )
        if isinstance(claimed, Claimed):
            return claimed
        if claimed.record is None:  # without a quota, only a record refuses a claim
            raise RuntimeError(f"idempotency key {key!r} was neither claimed nor found")
        return Found(claimed.record)

    def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response if the lease is still ours."""
        return self._run(complete_key(scope, key, lease_token, response, ttl=ttl))

    def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        self._run(release_key(scope, key, lease_token))

    def outage(self, exc: BaseException) -> Outage | None:
        """What a database error says about the database (`ustun.store.reach.outage`)."""
        return outage(exc)

    def _run(self, plan: Plan[T]) -> T:
        """`plan` in a transaction of its own, committed."""
        with self.engine.begin() as conn:
            db = sqlalchemy_connection(conn)
            begin_immediate(db)
            return run_sync(plan, db)


def one_scope(_: WSGIEnvironment) -> str:
    """Every request's key in one scope."""
    return ""


class IdempotencyMiddleware:
    """Make the `methods` requests under `prefix` safe to retry with an `Idempotency-Key`
    (`policy="required"`: refuse one without), its records in `database`: a database's URL or
    a SQLAlchemy engine on sqlite3 or psycopg; a Redis URL (`redis://`, `rediss://`, `unix://`)
    or a `redis.Redis` client, its keys under `redis_prefix`; or a `SyncRecordStore`.
    `scope_of(environ)` says whose key it is. The other options are the ASGI middleware's."""

    def __init__(
        self,
        app: WSGIApplication,
        database: str | Engine | SyncRedis | SyncRecordStore,
        *,
        prefix: str = "/",
        methods: Iterable[str] = ("POST", "PATCH"),
        policy: str = "optional",
        lease: float = DEFAULT_IDEMPOTENCY_LEASE,
        ttl: float = DEFAULT_IDEMPOTENCY_TTL,
        max_body: int = DEFAULT_IDEMPOTENCY_MAX_BODY,
        replay_headers: Iterable[str] = (),
        store_server_errors: bool = True,
        scope_of: Scope = one_scope,
        sealer: Sealer | None = None,
        fingerprint_key: bytes | None = None,
        previous_fingerprint_key: bytes | None = None,
        problem_base: str = "",
        redis_prefix: str = DEFAULT_REDIS_PREFIX,
    ) -> None:
        if policy not in ("required", "optional"):
            raise ValueError(f"policy must be 'required' or 'optional', not {policy!r}")
        self.app = app
        self.store = _store(database, redis_prefix)
        self.prefix = prefix
        self.methods = frozenset(m.upper() for m in methods)
        self.required = policy == "required"
        self.lease = lease
        self.ttl = ttl
        self.max_body = max_body
        self.replay_headers = frozenset(h.lower() for h in (*REPLAY_HEADERS, *replay_headers))
        self.store_server_errors = store_server_errors
        self.scope_of = scope_of
        self.sealer = sealer
        self.keys = tuple(k for k in (fingerprint_key, previous_fingerprint_key) if k is not None)
        self.problem_base = problem_base

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if tracing.ENABLED:
            # The request's server span, or the app's own (its instrumentation ran first).
            return tracing.wsgi(self._handle, environ, start_response)
        return self._handle(environ, start_response)

    def _handle(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        if method not in self.methods or not path.startswith(self.prefix):
            return self.app(environ, start_response)
        values = [environ[_HEADER]] if _HEADER in environ else []
        key = key_of(values, required=self.required, method=method, path=path)
        if isinstance(key, Refuse):
            return self._refuse(key, start_response)
        if key is None:
            return self.app(environ, start_response)
        body = _read_body(environ)
        request = keyed_request(
            self.scope_of(environ),
            key,
            method=method,
            path=path,
            query=environ.get("QUERY_STRING", "").encode("latin-1"),
            body=body,
            keys=self.keys,
        )
        try:
            claim = self.store.claim(
                request.scope, request.key, request.fingerprint, lease=self.lease, ttl=self.ttl
            )
        except Exception as exc:
            down = self.store.outage(exc)
            if down is None:
                raise
            log.warning("key %r not claimed, nothing ran: %s", request.key, down.detail)
            return self._outage(down, start_response)
        if not isinstance(claim, Claimed):
            return self._answer(not_claimed(claim, request, clock.now()), request, start_response)
        token = claim.lease_token
        try:
            status, headers, chunks = _called(self.app, environ)
        except BaseException:
            self._after_run(request, lambda: self.store.release(request.scope, request.key, token))
            raise
        answer = StoredResponse(status, self._kept_headers(headers), b"".join(chunks))
        if keep_plain(status, store_server_errors=self.store_server_errors) is Keep.STORE:
            if answer.body is not None and len(answer.body) > self.max_body:
                answer = StoredResponse(answer.status, answer.headers, None)
            stored = kept(answer, self.sealer, scope=request.scope, key=request.key)

            def complete() -> None:
                if not self.store.complete(request.scope, request.key, token, stored, ttl=self.ttl):
                    log.warning("key %r: lease lost before the response was stored", request.key)

            self._after_run(request, complete)
        else:
            self._after_run(request, lambda: self.store.release(request.scope, request.key, token))
        count("executed")
        start_response(_status_line(status), headers)
        return chunks

    def _after_run(self, request: KeyedRequest, settle: Callable[[], None]) -> None:
        """Complete or release the key once the app ran. Its effect is done: a store out of
        reach now is logged and the app's answer (or exception) goes out all the same, rather
        than a 503 whose retry would run it again; the claim holds the key until its lease ends.
        """
        try:
            settle()
        except Exception as exc:
            down = self.store.outage(exc)
            if down is None:
                raise
            log.error(
                "key %r: the app ran, but its answer was not stored nor the key released: %s",
                request.key,
                down.detail,
            )

    def _outage(self, down: Outage, start_response: StartResponse) -> Iterable[bytes]:
        """503 (or 507 for a full disk) with Retry-After, as the service answers an outage."""
        slug, wait = OUTAGE_PROBLEMS[down.kind]
        retry_after = format_retry_after(wait)
        refusal = Refuse(
            slug,
            f"{down.detail} Retry after {retry_after} s.",
            headers=(("Retry-After", retry_after),),
        )
        return self._refuse(refusal, start_response)

    def _kept_headers(self, headers: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        return tuple((n, v) for n, v in headers if n.lower() in self.replay_headers)

    def _answer(
        self, decision: Replay | Refuse, request: KeyedRequest, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Replay the stored answer (its body unsealed), or refuse."""
        if isinstance(decision, Replay):
            response = decision.response
            body = opened(response, self.sealer, scope=request.scope, key=request.key)
            if body is not None:
                count("replayed")
                headers = [
                    *response.headers,
                    ("Content-Length", str(len(body))),
                    (REPLAYED_HEADER.title(), "true"),
                ]
                start_response(_status_line(response.status), headers)
                return [body]
            decision = unavailable(response, sealer=self.sealer is not None, max_body=self.max_body)
        return self._refuse(decision, start_response)

    def _refuse(self, refusal: Refuse, start_response: StartResponse) -> Iterable[bytes]:
        """The refusal's problem+json, its outcome counted."""
        if refusal.outcome is not None:
            count(refusal.outcome)
        document = problem(
            refusal.slug, refusal.detail, base=self.problem_base, **dict(refusal.extensions)
        )
        body = encode(document)
        headers = [
            ("Content-Type", MEDIA_TYPE),
            ("Content-Length", str(len(body))),
            *refusal.headers,
        ]
        start_response(_status_line(document["status"]), headers)
        return [body]


def _called(
    app: WSGIApplication, environ: WSGIEnvironment
) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    """Run `app` to the end of its answer: its status, headers and body, buffered."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    # What the app writes through `write()` (PEP 3333's imperative API) comes first.
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, headers))
        return chunks.append

    result = app(environ, start_response)
    try:
        chunks.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = started[-1]
    return int(status.split(" ", 1)[0]), headers, chunks


def _read_body(environ: WSGIEnvironment) -> bytes:
    """The request's body, read whole; the app reads it again from a copy."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _store(database: str | Engine | SyncRedis | SyncRecordStore, prefix: str) -> SyncRecordStore:
    """The records in `database`: a Redis one by its URL's scheme, else SQL."""
    if isinstance(database, SyncRecordStore):
        return database
    if isinstance(database, Engine):
        return SqlRecords(database)
    if isinstance(database, str) and urlsplit(database).scheme not in _REDIS_SCHEMES:
        return SqlRecords(_engine(database))
    # redis-py only where Redis is used (`ustun[redis]`).
    from ustun.idempotency.redis_store import SyncRedisRecordStore

    if not isinstance(database, str):
        return SyncRedisRecordStore(database, prefix=prefix)
    try:
        return SyncRedisRecordStore.from_url(database, prefix=prefix)
    except ValueError as exc:  # not shown: it may hold a password
        raise ConfigError(f"IdempotencyMiddleware's Redis URL is not valid: {exc}") from None


def _engine(url: str) -> Engine:
    """A pool for `url` (`sqlite:///…`, `postgresql://…`) on sqlite3 or psycopg; SQLite's
    connections wait up to 30 s for its write lock."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        return create_engine(parsed.set(drivername="postgresql+psycopg"))
    if parsed.get_backend_name() == "sqlite":
        return create_engine(parsed, connect_args={"timeout": 30})
    return create_engine(parsed)
