"""The one id generator: prefixed, time-ordered, URL-safe ids such as `pay_01JD…`.

An id is the prefix, `_`, then 26 Crockford base-32 characters: 48 bits of Unix milliseconds
followed by 80 random bits (the ULID layout). Ids made later sort later, so lists can page
by id alone; within one millisecond the random part is incremented to keep order in-process.
The random bits come from the OS CSPRNG, read 256 ids' worth at a time (not a syscall per id),
and a forked child starts on fresh ones.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every pair of digits, indexed by the 10 bits it encodes: 13 look-ups write an id's 26 digits.
_PAIRS = [first + second for first in _ALPHABET for second in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
_RANDOM_BITS = 80
_RANDOM_BYTES = _RANDOM_BITS // 8
_BUFFERED_IDS = 256
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0
_buffer = b""
_offset = 0


def _random() -> int:
    """80 fresh random bits from the buffer, refilled from `os.urandom` when used up."""
    global _buffer, _offset
    if _offset >= len(_buffer):
        _buffer, _offset = os.urandom(_RANDOM_BYTES * _BUFFERED_IDS), 0
    start, _offset = _offset, _offset + _RANDOM_BYTES
    return int.from_bytes(_buffer[start:_offset])


def _after_fork_in_child() -> None:
    """Forget the parent's random bits and last id, so parent and child never make the same."""
    global _lock, _last_ms, _last_rand, _buffer, _offset
    _lock = threading.Lock()  # the fork may have copied it held by another thread
    _last_ms, _last_rand, _buffer, _offset = 0, 0, b"", 0


os.register_at_fork(after_in_child=_after_fork_in_child)


def new_id(prefix: str) -> str:
    """A new id for `prefix` (e.g. `pay`), strictly increasing within this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
        else:
            rand = _random()
        _last_ms, _last_rand = ms, rand
    # 130 bits: the milliseconds in the top 50, the random part in the low 80.
    value = ms << _RANDOM_BITS | rand & ((1 << _RANDOM_BITS) - 1)
    return f"{prefix}_{''.join([_PAIRS[value >> shift & 1023] for shift in _SHIFTS])}"
