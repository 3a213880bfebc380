"""Idempotency records in Redis, for apps whose business data lives elsewhere.

Each record is one hash whose Redis expiry is the record's TTL, so expired records vanish by
themselves. Claim, complete and release are Lua scripts: one round trip each, atomic.

The protocol (the keys, the scripts, their arguments and what their replies mean) is written
once, as `ScriptCall`s; `RedisRecordStore` runs them on `redis.asyncio` (the ASGI middleware),
`SyncRedisRecordStore` on the blocking client (`ustun.wsgi`), so both read and write the same
records.

Each scope's bytes of stored answers (headers and body) are an INCRBY counter, and a sorted
set holds each completed record's size by its expiry; a claim first takes what has expired off
the counter. With `max_bytes`, a scope at it is refused new keys (`OverQuota`) until then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from redis import Redis as _BlockingRedis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ustun import clock
from ustun.defaults import DEFAULT_REDIS_PREFIX
from ustun.idempotency.records import (
    Claim,
    Claimed,
    Found,
    OverQuota,
    Record,
    State,
    StoredResponse,
    new_lease_token,
)
from ustun.store.reach import Outage

T = TypeVar("T")
# The blocking client, beside `redis.asyncio`'s.
SyncRedis = _BlockingRedis

# KEYS[1] record, KEYS[2] the scope's bytes, KEYS[3] its sizes by expiry ("token:size" members);
# ARGV fingerprint, token, now_ms, lease_ms, ttl_ms, max_bytes (0: no limit).
# Returns {1} when claimed, {2, ms until the oldest stored answer expires} when the scope is at its
# quota, else {0, the record's fields}.
_CLAIM = """
local state = redis.call('HGET', KEYS[1], 'state')
if (not state) or (state == 'in_progress'
    and tonumber(redis.call('HGET', KEYS[1], 'locked_until')) <= tonumber(ARGV[3])) then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[3], 'LIMIT', 0, 256)
  if #expired > 0 then
    local freed = 0
    for _, member in ipairs(expired) do
      freed = freed + tonumber(string.match(member, ':(%d+)$'))
    end
    redis.call('ZREM', KEYS[3], unpack(expired))
    redis.call('DECRBY', KEYS[2], freed)
  end
  if tonumber(ARGV[6]) > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= tonumber(ARGV[6]) then
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2] or ARGV[3]
    return {2, tonumber(oldest) - tonumber(ARGV[3])}
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'state', 'in_progress', 'token', ARGV[2],
             'locked_until', tonumber(ARGV[3]) + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {1}
end
return {0, unpack(redis.call('HMGET', KEYS[1], 'fingerprint', 'state', 'locked_until',
                             'status', 'headers', 'body'))}
"""
# KEYS as _CLAIM's; ARGV token, ttl_ms, status, headers, has_body, body, expires_at_ms.
# The scope's keys live as long as their newest answer.
_COMPLETE = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'headers', ARGV[4])
local size = string.len(ARGV[4])
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'body', ARGV[6])
  size = size + string.len(ARGV[6])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[7], ARGV[1] .. ':' .. size)
redis.call('INCRBY', KEYS[2], size)
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
return 1
"""
# KEYS[1] record; ARGV token.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _expiry_ms(seconds: float) -> int:
    """A TTL in ms for PEXPIRE, which refuses 0."""
    return max(1, _ms(seconds))


def _now_ms() -> int:
    return int(clock.now().timestamp() * 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class ScriptCall(Generic[T]):
    """One run of one of the protocol's scripts: its source, keys and arguments, and `reply`,
    which reads what the script returned. Either client runs it (`register_script(script)`)."""

    script: str
    keys: list[str]
    args: list[Any]
    reply: Callable[[Any], T]


SCRIPTS = (_CLAIM, _COMPLETE, _RELEASE)


def record_keys(prefix: str, scope: str, key: str) -> list[str]:
    """The record's key, then its scope's bytes and sizes by expiry (see `_CLAIM`).

    Length-prefixing the scope keeps ("a:b", "c") and ("a", "b:c") apart; a record's name
    always has a third part, so no scope's usage keys share a name with a record.
    """
    scoped = f"{prefix}{len(scope)}:{scope}"
    return [f"{scoped}:{key}", f"{scoped}/bytes", f"{scoped}/expiry"]


def claim_call(
    prefix: str,
    scope: str,
    key: str,
    fingerprint: str,
    *,
    lease: float,
    ttl: float,
    max_bytes: int | None,
) -> ScriptCall[Claim]:
    """Claim the key, take over an expired lease, or read the record that is there; with
    `max_bytes`, refuse a new key of a scope at its quota."""
    token = new_lease_token()
    args = [fingerprint, token, _now_ms(), _ms(lease), _expiry_ms(ttl), max_bytes or 0]

    def reply(reply: Any) -> Claim:
        if int(reply[0]) == 1:
            return Claimed(token)
        if int(reply[0]) == 2 and max_bytes is not None:
            return OverQuota(max_bytes, int(reply[1]) / 1000)
        found, state, locked_until, status, headers, body = reply[1:7]
        response = None
        if status is not None:
            response = StoredResponse(
                int(status), StoredResponse.headers_from_json(_text(headers)), body
            )
        return Found(
            Record(
                _text(found),
                State(_text(state)),
                datetime.fromtimestamp(int(locked_until) / 1000, UTC),
                response,
            )
        )

    return ScriptCall(_CLAIM, record_keys(prefix, scope, key), args, reply)


def complete_call(
    prefix: str, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
) -> ScriptCall[bool]:
    """Store the response if the lease is still ours: True when it was."""
    expiry = _expiry_ms(ttl)
    args = [
        lease_token,
        expiry,
        response.status,
        response.headers_json(),
        "0" if response.body is None else "1",
        response.body or b"",
        _now_ms() + expiry,
    ]
    return ScriptCall(_COMPLETE, record_keys(prefix, scope, key), args, lambda done: int(done) == 1)


def release_call(prefix: str, scope: str, key: str, lease_token: str) -> ScriptCall[None]:
    """Delete the claim if it is still ours."""
    return ScriptCall(_RELEASE, record_keys(prefix, scope, key)[:1], [lease_token], lambda _: None)


def outage(exc: BaseException) -> Outage | None:
    """What a Redis client's error says about Redis (see `ustun.store.reach.outage`): down,
    unreachable or still loading its data; too slow to answer. None for any other error."""
    if isinstance(exc, RedisTimeoutError):
        return Outage("busy", "Redis, which keeps the idempotency records, did not answer in time.")
    if isinstance(exc, RedisConnectionError):
        return Outage(
            "unavailable",
            "Redis, which keeps the idempotency records, is unreachable or closed the "
            "connection (it may be restarting).",
        )
    return None


class RedisRecordStore:
    """Records in Redis under `prefix`; build it with `from_url("redis://…")`.

    `max_bytes` (None: no limit) is each scope's quota of bytes of stored answers.
    """

    def __init__(
        self, redis: Redis, *, prefix: str = DEFAULT_REDIS_PREFIX, max_bytes: int | None = None
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.max_bytes = max_bytes
        self._scripts = {script: redis.register_script(script) for script in SCRIPTS}

    @property
    def transactional(self) -> None:
        """None: records in Redis cannot commit with the app's database (plain mode only)."""
        return None

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_REDIS_PREFIX, max_bytes: int | None = None
    ) -> RedisRecordStore:
        """A store on the Redis at `url` (`redis://host:port/db`)."""
        return cls(Redis.from_url(url), prefix=prefix, max_bytes=max_bytes)

    async def prepare(self) -> None:
        """Nothing to create: Redis keys need no schema."""

    async def _run(self, call: ScriptCall[T]) -> T:
        return call.reply(await self._scripts[call.script](keys=call.keys, args=call.args))

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float
    ) -> Claim:
        """Claim the key, take over an expired lease, or return the record that is there."""
        return await self._run(
            claim_call(
                self.prefix, scope, key, fingerprint, lease=lease, ttl=ttl, max_bytes=self.max_bytes
            )
        )

    async def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response if the lease is still ours."""
        return await self._run(
            complete_call(self.prefix, scope, key, lease_token, response, ttl=ttl)
        )

    async def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        await self._run(release_call(self.prefix, scope, key, lease_token))

    async def close(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()


class SyncRedisRecordStore:
    """`RedisRecordStore`'s records on the blocking client (a WSGI server's threads): the same
    keys and scripts, each call one round trip. Build it with `from_url("redis://…")`."""

    def __init__(
        self,
        redis: SyncRedis,
        *,
        prefix: str = DEFAULT_REDIS_PREFIX,
        max_bytes: int | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.max_bytes = max_bytes
        self._scripts = {script: redis.register_script(script) for script in SCRIPTS}

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_REDIS_PREFIX, max_bytes: int | None = None
    ) -> SyncRedisRecordStore:
        """A store on the Redis at `url` (`redis://host:port/db`, `rediss://`, `unix://`)."""
        return cls(SyncRedis.from_url(url), prefix=prefix, max_bytes=max_bytes)

    def _run(self, call: ScriptCall[T]) -> T:
        return call.reply(self._scripts[call.script](keys=call.keys, args=call.args))

    def claim(self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float) -> Claim:
        """Claim the key, take over an expired lease, or return the record that is there."""
        return self._run(
            claim_call(
                self.prefix, scope, key, fingerprint, lease=lease, ttl=ttl, max_bytes=self.max_bytes
            )
        )

    def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response if the lease is still ours."""
        return self._run(complete_call(self.prefix, scope, key, lease_token, response, ttl=ttl))

    def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        self._run(release_call(self.prefix, scope, key, lease_token))

    def outage(self, exc: BaseException) -> Outage | None:
        """What `exc`, raised by this store, says about Redis (see `outage`)."""
        return outage(exc)

    def close(self) -> None:
        """Close the connection pool."""
        self.redis.close()
