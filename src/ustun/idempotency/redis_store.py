"""Idempotency records in Redis, for apps whose business data lives elsewhere.

Each record is one hash whose Redis expiry is the record's TTL, so expired records vanish by
themselves. Claim, complete and release are Lua scripts: one round trip each, atomic.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from ustun import clock
from ustun.idempotency.records import (
    Claim,
    Claimed,
    Found,
    Record,
    State,
    StoredResponse,
    new_lease_token,
)

DEFAULT_PREFIX = "ustun:idem:"

# KEYS[1] record; ARGV fingerprint, token, now_ms, lease_ms, ttl_ms.
_CLAIM = """
local state = redis.call('HGET', KEYS[1], 'state')
if (not state) or (state == 'in_progress'
    and tonumber(redis.call('HGET', KEYS[1], 'locked_until')) <= tonumber(ARGV[3])) then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'state', 'in_progress', 'token', ARGV[2],
             'locked_until', tonumber(ARGV[3]) + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {1}
end
return {0, unpack(redis.call('HMGET', KEYS[1], 'fingerprint', 'state', 'locked_until',
                             'status', 'headers', 'body'))}
"""
# KEYS[1] record; ARGV token, ttl_ms, status, headers, has_body, body.
_COMPLETE = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'headers', ARGV[4])
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'body', ARGV[6]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
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
    """Records in Redis under `prefix`; build it with `from_url("redis://…")`."""

    def __init__(self, redis: Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.redis = redis
        self.prefix = prefix
        self._claim = redis.register_script(_CLAIM)
        self._complete = redis.register_script(_COMPLETE)
        self._release = redis.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, *, prefix: str = DEFAULT_PREFIX) -> RedisRecordStore:
        """A store on the Redis at `url` (`redis://host:port/db`)."""
        return cls(Redis.from_url(url), prefix=prefix)

    async def prepare(self) -> None:
        """Nothing to create: Redis keys need no schema."""

    def _key(self, scope: str, key: str) -> str:
        # Length-prefixing the scope keeps ("a:b", "c") and ("a", "b:c") apart.
        return f"{self.prefix}{len(scope)}:{scope}:{key}"

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float
    ) -> Claim:
        """Claim the key, take over an expired lease, or return the record that is there."""
        token = new_lease_token()
        now_ms = int(clock.now().timestamp() * 1000)
        reply = await self._claim(
            keys=[self._key(scope, key)],
            args=[fingerprint, token, now_ms, _ms(lease), _expiry_ms(ttl)],
        )
        if int(reply[0]) == 1:
            return Claimed(token)
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
        done = await self._complete(
            keys=[self._key(scope, key)],
            args=[
                lease_token,
                _expiry_ms(ttl),
                response.status,
                response.headers_json(),
                "0" if response.body is None else "1",
                response.body or b"",
            ],
        )
        return int(done) == 1

    async def release(self, scope: str, key: str, lease_token: str) -> None:
        """Delete the claim if it is still ours."""
        await self._release(keys=[self._key(scope, key)], args=[lease_token])

    async def close(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()
