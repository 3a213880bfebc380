"""Idempotency records in Redis, for apps whose business data lives elsewhere.

Each record is one hash whose Redis expiry is the record's TTL, so expired records vanish by
themselves. Claim, complete and release are Lua scripts: one round trip each, atomic.

Each scope's bytes of stored answers (headers and body) are an INCRBY counter, and a sorted
set holds each completed record's size by its expiry; a claim first takes what has expired off
the counter. With `max_bytes`, a scope at it is refused new keys (`OverQuota`) until then.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        self._claim = redis.register_script(_CLAIM)
        self._complete = redis.register_script(_COMPLETE)
        self._release = redis.register_script(_RELEASE)

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

    def _keys(self, scope: str, key: str) -> list[str]:
        """The record's key, then its scope's bytes and sizes by expiry (see `_CLAIM`).

        Length-prefixing the scope keeps ("a:b", "c") and ("a", "b:c") apart; a record's name
        always has a third part, so no scope's usage keys share a name with a record.
        """
        scoped = f"{self.prefix}{len(scope)}:{scope}"
        return [f"{scoped}:{key}", f"{scoped}/bytes", f"{scoped}/expiry"]

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float
    ) -> Claim:
        """Claim the key, take over an expired lease, or return the record that is there."""
        token = new_lease_token()
        now_ms = int(clock.now().timestamp() * 1000)
        reply = await self._claim(
            keys=self._keys(scope, key),
            args=[fingerprint, token, now_ms, _ms(lease), _expiry_ms(ttl), self.max_bytes or 0],
        )
        if int(reply[0]) == 1:
            return Claimed(token)
        if int(reply[0]) == 2 and self.max_bytes is not None:
            return OverQuota(self.max_bytes, int(reply[1]) / 1000)
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

    async def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response if the lease is still ours."""
        expiry = _expiry_ms(ttl)
        done = await self._complete(
            keys=self._keys(scope, key),
            args=[
                lease_token,
                expiry,
                response.status,
                response.headers_json(),
                "0" if response.body is None else "1",
                response.body or b"",
                int(clock.now().timestamp() * 1000) + expiry,
            ],
        )
        return int(done) == 1

    async def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        await self._release(keys=self._keys(scope, key)[:1], args=[lease_token])

    async def close(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()
