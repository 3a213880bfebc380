"""The one id generator: prefixed, time-ordered, URL-safe ids such as `pay_01JD…`.

An id is the prefix, `_`, then 26 Crockford base-32 characters: 48 bits of Unix milliseconds
followed by 80 random bits (the ULID layout). Ids made later sort later, so lists can page
by id alone; within one millisecond the random part is incremented to keep order in-process.
"""

from __future__ import annotations

import secrets
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """A new id for `prefix` (e.g. `pay`), strictly increasing within this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
        else:
            rand = secrets.randbits(80)
        _last_ms, _last_rand = ms, rand
    return f"{prefix}_{_encode(ms, 10)}{_encode(rand & ((1 << 80) - 1), 16)}"
