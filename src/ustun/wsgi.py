"""`IdempotencyMiddleware` for any WSGI app, in plain mode: the app commits its own writes, and
the answer is stored after it ran.

The key is claimed first (one upsert, in a transaction of its own, `idempotency.sql`'s plans on
a synchronous connection): a concurrent duplicate finds the claim and gets 409, a retry of a
finished request gets the stored answer with `Idempotent-Replayed: true`, the same key on
another request 422. The app's answer is buffered, stored (or the key released, after an
exception, a refusal a retry may correct, or with `store_server_errors=False` a 5xx), then
sent. The same decisions (`idempotency.decision`) and statements as the ASGI middleware's plain
mode; a crash between the app's commit and the stored answer can run a retry again (a Flask app
on SQLAlchemy has `ustun.flask.idempotent`, which commits both together).

    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, "postgresql://app@db/app")

The database holds ustun's tables (`ustun migrate` with `USTUN_DATABASE_URL` pointing at it).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from ustun import clock, instrumentation
from ustun.defaults import (
    DEFAULT_IDEMPOTENCY_LEASE,
    DEFAULT_IDEMPOTENCY_MAX_BODY,
    DEFAULT_IDEMPOTENCY_TTL,
)
from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.idempotency.decision import (
    Keep,
    Refuse,
    Replay,
    found,
    keep_plain,
    key_of,
    unavailable,
)
from ustun.idempotency.decision import Request as KeyedRequest
from ustun.idempotency.hosted import keyed_request
from ustun.idempotency.middleware import REPLAY_HEADERS, REPLAYED_HEADER
from ustun.idempotency.records import Claimed, StoredResponse
from ustun.idempotency.sealing import Sealer, kept, opened
from ustun.idempotency.sql import claim_key, complete_key, release_key
from ustun.store.dbapi import begin_immediate, sqlalchemy_connection
from ustun.store.plans import Plan, run_sync

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("ustun.idempotency")
T = TypeVar("T")
Scope = Callable[["WSGIEnvironment"], str]
_HEADER = "HTTP_IDEMPOTENCY_KEY"


def one_scope(_: WSGIEnvironment) -> str:
    """Every request's key in one scope."""
    return ""


class IdempotencyMiddleware:
    """Make the `methods` requests under `prefix` safe to retry with an `Idempotency-Key`
    (`policy="required"`: refuse one without), its records in `database` (a URL, or a
    SQLAlchemy engine on sqlite3 or psycopg). `scope_of(environ)` says whose key it is. The
    other options are the ASGI middleware's."""

    def __init__(
        self,
        app: WSGIApplication,
        database: str | Engine,
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
    ) -> None:
        if policy not in ("required", "optional"):
            raise ValueError(f"policy must be 'required' or 'optional', not {policy!r}")
        self.app = app
        self.engine = database if isinstance(database, Engine) else _engine(database)
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
        claim = self._run(
            claim_key(
                request.scope,
                request.key,
                request.fingerprint,
                lease=self.lease,
                ttl=self.ttl,
                max_bytes=None,
            )
        )
        if not isinstance(claim, Claimed):
            if claim.record is None:  # without a quota, only a record refuses a claim
                raise RuntimeError(f"idempotency key {key!r} was neither claimed nor found")
            return self._answer(found(claim.record, request, clock.now()), request, start_response)
        release = release_key(request.scope, request.key, claim.lease_token)
        try:
            status, headers, chunks = _called(self.app, environ)
        except BaseException:
            self._run(release)
            raise
        answer = StoredResponse(status, self._kept_headers(headers), b"".join(chunks))
        if keep_plain(status, store_server_errors=self.store_server_errors) is Keep.STORE:
            if answer.body is not None and len(answer.body) > self.max_body:
                answer = StoredResponse(answer.status, answer.headers, None)
            stored = kept(answer, self.sealer, scope=request.scope, key=request.key)
            completion = complete_key(
                request.scope, request.key, claim.lease_token, stored, ttl=self.ttl
            )
            if not self._run(completion):
                log.warning("key %r: lease lost before the response was stored", request.key)
        else:
            self._run(release)
        _count("executed")
        start_response(_status_line(status), headers)
        return chunks

    def _run(self, plan: Plan[T]) -> T:
        """`plan` in a transaction of its own, committed."""
        with self.engine.begin() as conn:
            db = sqlalchemy_connection(conn)
            begin_immediate(db)
            return run_sync(plan, db)

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
                _count("replayed")
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
            _count(refusal.outcome)
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


def _engine(url: str) -> Engine:
    """A pool for `url` (`sqlite:///…`, `postgresql://…`) on sqlite3 or psycopg; SQLite's
    connections wait up to 30 s for its write lock."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        return create_engine(parsed.set(drivername="postgresql+psycopg"))
    if parsed.get_backend_name() == "sqlite":
        return create_engine(parsed, connect_args={"timeout": 30})
    return create_engine(parsed)


def _count(outcome: str) -> None:
    instrumentation.emit("idempotency", outcome=outcome)
