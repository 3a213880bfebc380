"""Reading a `text/event-stream` as it arrives (WHATWG HTML §9.2.6, interpreting a stream)."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

MEDIA_TYPE = "text/event-stream"

# end-of-line = ( cr lf / cr / lf )
_LINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event: its type (`message` by default), data and the last event ID."""

    event: str
    data: str
    id: str
    retry: int | None = None


class EventStreamParser:
    """Feed bytes as they arrive; get back the events completed so far.

    Sans-I/O, like h11: the caller owns the socket, this owns only the grammar.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._started = False
        self._after_cr = False
        self._event = ""
        self._data: list[str] = []
        self._retry: int | None = None
        self.last_event_id = ""

    def feed(self, chunk: bytes) -> list[Event]:
        """Parse `chunk`; return every event whose blank line has now arrived."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if self._started is False:
            self._started = True
            text = text.removeprefix("\ufeff")  # "One leading U+FEFF BYTE ORDER MARK ... ignored"
        if self._after_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across two chunks
        text = self._buffer + text
        self._after_cr = text.endswith("\r")
        lines = _LINE.split(text)
        self._buffer = lines.pop()  # no terminator yet
        return [event for line in lines if (event := self._line(line)) is not None]

    def _line(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment, e.g. a keep-alive
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self.last_event_id = value
        elif field == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> Event | None:
        data, kind, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry = [], "", None
        if not data:
            return None
        return Event(kind or "message", "\n".join(data), self.last_event_id, retry)
