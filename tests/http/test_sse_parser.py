"""The event-stream parser on the WHATWG examples, however the bytes are split."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from ustun.http.sse_parser import Event, EventStreamParser

STREAM = (
    "\ufeff: keep-alive\r\n"
    "retry: 1500\n"
    "event: job.progress\n"
    "id: 1\n"
    'data: {"status": "processing",\n'
    'data:  "progress": 40}\n'
    "\n"
    "data:first\r"
    "data\r\n"
    "\r\n"
    "id: 2\n"
    "\n"
    "event: job.done\n"
    "id: 3\n"
    'data: {"status": "done"}\n'
    "\n"
    "data: unfinished"
).encode()

EXPECTED = [
    Event("job.progress", '{"status": "processing",\n "progress": 40}', "1", 1500),
    Event("message", "first\n", "1"),
    Event("job.done", '{"status": "done"}', "3"),
]


def test_the_examples_parse() -> None:
    parser = EventStreamParser()
    assert parser.feed(STREAM) == EXPECTED
    assert parser.last_event_id == "3"


@given(st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    parser = EventStreamParser()
    events = [e for a, b in itertools.pairwise(points) for e in parser.feed(STREAM[a:b])]
    assert events == EXPECTED


def test_an_id_with_nul_is_ignored_and_a_bad_retry_too() -> None:
    parser = EventStreamParser()
    assert parser.feed(b"id: a\x00b\nretry: soon\ndata: x\n\n") == [Event("message", "x", "")]
