"""Idempotency keys in a host framework's own transaction (Django, Flask), on its connection.

The synchronous twin of the ASGI middleware's transactional mode, on the same decisions
(`decision`) and the same statements (`sql`'s plans): the key is read, and held where the
database can, in the transaction the handler writes in; a success commits with its answer, a
storable refusal rolls the handler's writes back and is stored alone, anything else rolls back
and leaves the key free. `HostedKeys.call` returns the handler's own response, or what to
answer instead (`Replayed`, or a `Refuse` to render as a problem).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Generic, TypeVar

from ustun import clock
from ustun.defaults import DEFAULT_IDEMPOTENCY_MAX_BODY, DEFAULT_IDEMPOTENCY_TTL
from ustun.http.fingerprint import fingerprint
from ustun.idempotency.decision import (
    Full,
    Keep,
    Refuse,
    Replay,
    Request,
    Run,
    count,
    found,
    keep_transactional,
    on_lookup,
    over_quota,
    unavailable,
)
from ustun.idempotency.records import OverQuota, Record, StoredResponse
from ustun.idempotency.sealing import Sealer, kept, opened
from ustun.idempotency.sql import come_back_at, lock_key, read_key, settle_key
from ustun.store.dbapi import DbapiConnection
from ustun.store.plans import Plan, run_sync

R = TypeVar("R")
# Opens a transaction (or a savepoint inside one) on the host's connection: it commits when
# the block ends, and rolls back when the block raises.
Atomic = Callable[[], AbstractContextManager[object]]
# The host's connection, in the transaction `Atomic` opened.
Connect = Callable[[], DbapiConnection]


@dataclass(frozen=True, slots=True)
class Replayed:
    """The stored answer of the key's first request, its body unsealed: send it again."""

    response: StoredResponse
    body: bytes


Answer = Replayed | Refuse


def keyed_request(
    scope: str,
    key: str,
    *,
    method: str,
    path: str,
    query: bytes,
    body: bytes,
    keys: tuple[bytes, ...],
) -> Request:
    """The keyed `Request` of a host framework's request, fingerprinted under the first of
    `keys` (the current fingerprint key; none: unkeyed)."""
    return Request(
        scope=scope,
        key=key,
        method=method,
        path=path,
        query=query,
        body=body,
        fingerprint=fingerprint(method, path, query, body, key=keys[0] if keys else None),
        keys=keys,
    )


class _Rollback(Exception, Generic[R]):
    """Leaves the transaction without committing the handler's writes."""

    def __init__(self, result: R | Answer, keep: Keep | None = None) -> None:
        self.result = result
        self.keep = keep


@dataclass(frozen=True, slots=True)
class HostedKeys:
    """Idempotency keys on `connection()`, in transactions `atomic()` opens.

    `max_bytes`: each scope's quota of stored answers (None: none); `max_body`: the largest
    body kept for replay; `sealer` keeps a `no-store` body sealed (else it is not kept);
    `fingerprint_keys`: the current key of the stored fingerprints, then a rotated-away one
    (none: plain SHA-256). `ustun.keys.hosted_keys` makes one from the settings.
    """

    connection: Connect
    atomic: Atomic
    ttl: float = DEFAULT_IDEMPOTENCY_TTL
    max_bytes: int | None = None
    max_body: int = DEFAULT_IDEMPOTENCY_MAX_BODY
    sealer: Sealer | None = None
    fingerprint_keys: tuple[bytes, ...] = ()

    def request(
        self, scope: str, key: str, *, method: str, path: str, query: bytes, body: bytes
    ) -> Request:
        """`keyed_request` under these `fingerprint_keys`."""
        keys = self.fingerprint_keys
        return keyed_request(
            scope, key, method=method, path=path, query=query, body=body, keys=keys
        )

    def call(
        self,
        request: Request,
        handler: Callable[[], R],
        stored: Callable[[R], StoredResponse],
    ) -> R | Answer:
        """Run `handler` once for `request`'s key, in one transaction with its stored answer
        (`stored(response)`, the body at most `max_body` bytes else None); or answer what
        holds the key."""
        try:
            with self.atomic():
                conn = self.connection()
                held = lock_key(request.scope, request.key, max_bytes=self.max_bytes)
                lookup = run_sync(held, conn)
                decision = on_lookup(lookup, request, clock.now())
                if isinstance(decision, Full):
                    decision = over_quota(self._over_quota(conn, request.scope))
                if not isinstance(decision, Run):
                    raise _Rollback(self._answer(decision, request))
                response = handler()
                answer = self._kept(stored(response), request)
                keep = keep_transactional(answer.status)
                if keep is not Keep.COMMIT:
                    raise _Rollback(response, keep)
                taken = run_sync(self._settle(request, answer), conn)
                if taken is not None:
                    raise _Rollback(self._answer(found(taken, request, clock.now()), request))
        except _Rollback as rollback:
            return self._after_rollback(rollback, request, stored)
        except Exception:
            # The handler may have failed only because the key's first request already did its
            # work (a unique constraint, say): then that request's answer stands.
            with self.atomic():
                record = run_sync(read_key(request.scope, request.key), self.connection())
            if record is None:
                raise
            return self._answer(found(record, request, clock.now()), request)
        count("executed")
        return response

    def _after_rollback(
        self, rollback: _Rollback[R], request: Request, stored: Callable[[R], StoredResponse]
    ) -> R | Answer:
        """The handler's writes are gone: store a storable refusal alone, else just answer."""
        result = rollback.result
        if rollback.keep is Keep.STORE and not isinstance(result, (Replayed, Refuse)):
            answer = self._kept(stored(result), request)
            with self.atomic():
                taken = run_sync(self._settle(request, answer), self.connection())
            if taken is not None:
                return self._answer(found(taken, request, clock.now()), request)
        return result

    def _settle(self, request: Request, answer: StoredResponse) -> Plan[Record | None]:
        return settle_key(request.scope, request.key, request.fingerprint, answer, ttl=self.ttl)

    def _kept(self, answer: StoredResponse, request: Request) -> StoredResponse:
        """What to store of the answer: a body over `max_body` not at all (its replay is a 409
        `idempotency-response-unavailable`), a `no-store` one sealed (`sealing.kept`)."""
        if answer.body is not None and len(answer.body) > self.max_body:
            answer = replace(answer, body=None)
        return kept(answer, self.sealer, scope=request.scope, key=request.key)

    def _answer(self, decision: Replay | Refuse, request: Request) -> Answer:
        """The stored answer, unsealed, or the refusal (also when its body was not kept); its
        outcome counted."""
        if isinstance(decision, Replay):
            response = decision.response
            body = opened(response, self.sealer, scope=request.scope, key=request.key)
            if body is not None:
                count("replayed")
                return Replayed(response, body)
            decision = unavailable(response, sealer=self.sealer is not None, max_body=self.max_body)
        if decision.outcome is not None:
            count(decision.outcome)
        return decision

    def _over_quota(self, conn: DbapiConnection, scope: str) -> OverQuota:
        """The refusal of a new key of the full `scope`: when to come back."""
        if self.max_bytes is None:
            raise RuntimeError("a scope can be full only under a quota")
        wait = run_sync(come_back_at(scope), conn) - clock.now()
        return OverQuota(self.max_bytes, wait / timedelta(seconds=1))
