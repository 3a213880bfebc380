import os
import re
import time
from datetime import UTC, datetime

from ustun import clock, ids


def test_ids_are_prefixed_and_url_safe() -> None:
    value = ids.new_id("pay")
    assert re.fullmatch(r"pay_[0-9A-HJKMNP-TV-Z]{26}", value)


def test_ids_increase_within_a_process() -> None:
    made = [ids.new_id("x") for _ in range(10_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_an_id_starts_with_its_unix_milliseconds_in_crockford_base32() -> None:
    before = time.time_ns() // 1_000_000
    digits = ids.new_id("x").removeprefix("x_")
    after = time.time_ns() // 1_000_000
    made = 0
    for digit in digits[:10]:
        made = made * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(digit)
    assert before <= made <= after


def test_clock_is_utc_aware_and_rfc3339() -> None:
    moment = clock.now()
    assert moment.tzinfo is not None
    assert moment.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    fixed = datetime(2026, 6, 1, 12, 30, 5, 123456, tzinfo=UTC)
    assert clock.rfc3339(fixed) == "2026-06-01T12:30:05.123Z"


def test_a_forked_child_makes_ids_of_its_own() -> None:
    """Parent and child draw different random bits after a fork, even in the same millisecond."""
    ids.new_id("x")  # the parent has random bits buffered and a last id
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next ids, then leave without running pytest's teardown
        os.write(write, " ".join(ids.new_id("x") for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    parent = {ids.new_id("x")[-16:] for _ in range(3)}
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = {made[-16:] for made in pipe.read().split()}
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child) == 3
    assert parent.isdisjoint(child)
