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
# Every pair of digits, indexed by the 10 bits it encodes: 13 look-ups write an id's 26 digits.
_PAIRS = [first + second for first in _ALPHABET for second in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
_RANDOM_BITS = 80
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def new_id(prefix: str) -> str:
    """A new id for `prefix` (e.g. `pay`), strictly increasing within this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
        else:
            rand = secrets.randbits(_RANDOM_BITS)
        _last_ms, _last_rand = ms, rand
    # 130 bits: the milliseconds in the top 50, the random part in the low 80.
    value = ms << _RANDOM_BITS | rand & ((1 << _RANDOM_BITS) - 1)
    return f"{prefix}_{''.join([_PAIRS[value >> shift & 1023] for shift in _SHIFTS])}"
