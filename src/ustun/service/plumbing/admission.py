"""What the service's plumbing (`pipeline.Plumbing`) checks per request: API keys and portal
tokens (`Authenticator`, with its `KeyCache`) and each account's request rate (`RequestRate`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from ustun import portal
from ustun.http.ratelimit import RatePolicy, TokenBucket
from ustun.http.retry_after import format_retry_after
from ustun.service.plumbing.accounts import Credential, authenticate, hash_key
from ustun.service.plumbing.auth_failures import FailureLimiter
from ustun.service.plumbing.portal_access import allows, authenticate_portal
from ustun.service.plumbing.problems import problem_response
from ustun.store import Database

MAX_BUCKETS = 10_000


class RequestRate:
    """Give each account `rate` requests a second, in bursts of at most `burst`.

    A token bucket per account (`ustun.http.ratelimit`), in this process's memory: each
    `ustun serve` process counts on its own. Every answer under the API's prefix carries
    `RateLimit-Policy` and `RateLimit`; a request without a token runs nothing and is answered
    429 `rate-limited` with `Retry-After`. Past `max_buckets` accounts, those idle long enough
    to be full again are forgotten (a new bucket is a full one).
    """

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        max_buckets: int = MAX_BUCKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = RatePolicy(rate, burst)
        self.max_buckets = max_buckets
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._policy_field = (b"ratelimit-policy", self.policy.policy_field().encode())

    def check(self, scope: Scope, account_id: str) -> Response | list[tuple[bytes, bytes]]:
        """Take one of the account's tokens: the fields its answer carries, else the 429."""
        now = self._clock()
        bucket = self._buckets.get(account_id) or self._new_bucket(account_id, now)
        decision = bucket.take(self.policy, now)
        limit = self.policy.limit_field(decision)
        if decision.allowed:
            return [self._policy_field, (b"ratelimit", limit.encode())]
        wait = format_retry_after(decision.wait)
        return problem_response(
            Request(scope),
            "rate-limited",
            f"This account may send {self.policy.rate:g} requests a second, in bursts of "
            f"at most {self.policy.burst}; try again in {wait} s.",
            headers={
                "retry-after": wait,
                "ratelimit-policy": self._policy_field[1].decode(),
                "ratelimit": limit,
            },
        )

    def _new_bucket(self, account_id: str, now: float) -> TokenBucket:
        if len(self._buckets) >= self.max_buckets:
            burst = self.policy.burst
            self._buckets = {
                held: bucket
                for held, bucket in self._buckets.items()
                if bucket.level(self.policy, now) < burst
            }
        bucket = self._buckets[account_id] = TokenBucket(self.policy, now)
        return bucket


# How long a process trusts a key it has checked, counted from the read that found it valid: a
# key revoked elsewhere (another process, `ustun keys revoke`) stops working here within this
# many seconds; here, at once.
KEY_CACHE_SECONDS = 5.0
KEY_CACHE_SIZE = 10_000


class KeyCache:
    """Keys this process accepted recently, by their hash, each for `ttl` seconds from the read
    that found it valid. A check takes a `ticket` before its read and hands it to `put`."""

    def __init__(self, ttl: float = KEY_CACHE_SECONDS, size: int = KEY_CACHE_SIZE) -> None:
        self.ttl = ttl
        self.size = size
        self._entries: dict[str, tuple[Credential, float]] = {}
        self._revocations = 0

    def get(self, key_hash: str) -> Credential | None:
        """The cached credential of a key, if still fresh."""
        hit = self._entries.get(key_hash)
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def ticket(self) -> tuple[int, float]:
        """Taken before a key is read: the revocations so far, and when what is read expires."""
        return self._revocations, time.monotonic() + self.ttl

    def put(self, key_hash: str, credential: Credential, ticket: tuple[int, float]) -> None:
        """Remember an accepted key, unless a key was revoked here since its `ticket`."""
        revocations, expires = ticket
        if revocations != self._revocations:
            return  # the read may predate that revoke (and be of that very key)
        if len(self._entries) >= self.size:
            self._entries.clear()
        self._entries[key_hash] = (credential, expires)

    def forget(self, key_id: str) -> None:
        """Drop a revoked key at once, and keep checks under way from caching it again."""
        self._revocations += 1
        for key_hash in [h for h, (c, _) in self._entries.items() if c.key_id == key_id]:
            del self._entries[key_hash]


NO_KEY = "Missing or unknown API key: send `Authorization: Bearer <key>`."


def _unauthorized(scope: Scope, detail: str) -> Response:
    """401 `unauthorized` saying why, with the challenge of RFC 6750 §3."""
    return problem_response(
        Request(scope), "unauthorized", detail, headers={"www-authenticate": 'Bearer realm="ustun"'}
    )


class Authenticator:
    """Check `Authorization: Bearer <key>` and put the `Account` (and the whole `Credential`)
    in scope state. A portal token (`ptl_…`) acts as its session's account on the routes
    `portal_access.allows` lists, and is refused (403 `forbidden`) on any other.

    Accepted keys are cached (`KeyCache`), so a hot API does not read the key table per
    request. The failure limiter throttles failures, never credentials: a valid key always
    passes, even from an address past its limit of failed checks (one office behind one NAT
    address is many clients); only a key that fails is answered 429 instead of 401 there.
    """

    def __init__(self, db: Database, *, cache: KeyCache, failures: FailureLimiter) -> None:
        self.db = db
        self.cache = cache
        self.failures = failures

    async def check(self, scope: Scope) -> Credential | Response:
        """The request's credential (also put in scope state), else the answer refusing it."""
        # The header straight from the scope: no `Request` or `Headers` built for a cache hit.
        authorization = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, key = authorization.decode("latin-1").partition(" ")
        key = key.strip()
        bearer = scheme.lower() == "bearer" and bool(key)
        checked: Credential | Response | None = None
        if bearer and key.startswith(portal.TOKEN_PREFIX):
            checked = await self._portal(scope, key)
        else:
            checked = await self._key(scope, key) if bearer else None
        if checked is None:
            return _unauthorized(scope, NO_KEY)
        if isinstance(checked, Credential):
            state = scope.setdefault("state", {})
            state["account"] = checked.account
            state["credential"] = checked
        return checked

    async def _key(self, scope: Scope, key: str) -> Credential | Response | None:
        """The credential of an API key (cached), else None, or the limiter's refusal."""
        digest = hash_key(key)
        credential = self.cache.get(digest)
        if credential is None:
            ticket = self.cache.ticket()
            credential = await authenticate(self.db, key)
            if credential is None:
                return self._failed(scope)
            self.cache.put(digest, credential, ticket)
        return credential

    async def _portal(self, scope: Scope, token: str) -> Credential | Response:
        """The credential of a live portal token on a route it may call, else the refusal:
        401 saying why (unknown, expired, revoked), 403 `forbidden` on any other route.
        Never cached: a link stops working the moment it expires or is revoked."""
        found = await authenticate_portal(self.db, token)
        if isinstance(found, str):
            return self._failed(scope) or _unauthorized(scope, found)
        if not allows(scope["method"], scope["path"]):
            return problem_response(
                Request(scope),
                "forbidden",
                "A portal link manages its account's webhook endpoints, deliveries and events "
                f"only: {scope['method']} {scope['path']} needs an API key.",
            )
        return found

    def _failed(self, scope: Scope) -> Response | None:
        """Count a failed check against the client's address; its 429 once past the limit."""
        request = Request(scope)
        refusal = self.failures.failed(request.client.host if request.client else None)
        if refusal is None:
            return None
        return problem_response(request, refusal.slug, refusal.detail, headers=refusal.headers)
