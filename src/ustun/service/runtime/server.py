"""The HTTP protocol `ustun serve` runs: uvicorn's httptools protocol with limits on the client.

uvicorn bounds neither the size of a request head nor the time a client takes to send it or
its body. This subclass adds, per connection:

- at most `max_header_bytes` of request line and headers, and `max_headers` headers: past
  either the client gets 431 `headers-too-large` and the connection is closed, so a head is
  never buffered beyond the limit (plus one read);
- the head within `header_timeout` seconds of the connection being made (first request) or of
  its first byte arriving (later requests on a kept-alive connection);
- the body within `body_timeout` seconds of the head (time spent while the app has not taken
  what it was sent does not count).

A client over time is disconnected without an answer. Idle kept-alive connections are
uvicorn's own `timeout_keep_alive`.

The app's answers carry the app's own `Date` (`pipeline.HttpDate`: read as each answer starts)
instead of uvicorn's, which is refreshed once a second and so could be older than the
`Last-Modified` of what the request had just written; uvicorn's own answers (400, 431) keep it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.settings import Settings


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one connection may send, and how slowly."""

    max_header_bytes: int
    max_headers: int
    header_timeout: float
    body_timeout: float
    # The base of the 431's problem `type`: the service's public URL.
    problem_base: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerLimits:
        """The limits `settings` name."""
        return cls(
            max_header_bytes=settings.max_header_bytes,
            max_headers=settings.max_headers,
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            problem_base=settings.public_base_url,
        )


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the limits."""


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with `limits` (set on a subclass by `limited_protocol`)."""

    limits: ServerLimits
    # Slots: uvicorn's own 28 attributes nearly fill the keys an instance dict may share (30 in
    # CPython 3.11); five more in the dict made every request some 0.6 µs slower.
    __slots__ = ("_body_paused", "_head_bytes", "_head_refused", "_in_body", "_in_head", "_timer")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between requests, or part of a head received
        self._in_body = False
        self._head_bytes = 0  # bytes read since the current head began (whole reads)
        self._head_refused = False
        self._body_paused = False  # the app held the body back since its timer was armed
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Usually the whole request came in this read: nothing is left to bound.
        if (self._head_bytes or self._in_body) and not self.transport.is_closing():
            self._bound_the_rest()

    def on_headers_complete(self) -> None:
        # Counted exactly only when the reads alone pass the byte limit (never, usually).
        if len(self.headers) > self.limits.max_headers or (
            self._head_bytes > self.limits.max_header_bytes
            and self._head_size() > self.limits.max_header_bytes
        ):
            self._head_refused = True
            raise _HeadTooLarge
        self._in_head, self._in_body, self._head_bytes = False, True, 0
        self._body_paused = False
        if self._timer is not None:
            self._disarm()
        super().on_headers_complete()
        self.cycle.default_headers = self.config.encoded_headers  # all but uvicorn's Date

    def on_message_complete(self) -> None:
        self._in_head, self._in_body = True, False
        if self._timer is not None:
            self._disarm()
        super().on_message_complete()

    def _bound_the_rest(self) -> None:
        """Time what this read left unfinished; refuse a head already over the byte limit."""
        if self._in_body:
            if self._timer is None:
                self._arm(self.limits.body_timeout, self._body_timed_out)
        elif self._head_bytes > self.limits.max_header_bytes:
            # The parser holds an unfinished head (a header value it buffers whole, maybe).
            self._refuse_head()
        elif self._timer is None:
            self._arm(self.limits.header_timeout, self._head_timed_out)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request it could not parse; 431 when a limit stopped it."""
        if self._head_refused:
            self._refuse_head()
        else:
            super().send_400_response(msg)

    def _head_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _refuse_head(self) -> None:
        """Answer 431 (unless an earlier request's answer is still being sent) and close."""
        if self.cycle is None or self.cycle.response_complete:
            body = encode(
                problem(
                    "headers-too-large",
                    f"The request line and headers must fit in {self.limits.max_header_bytes} "
                    f"bytes and {self.limits.max_headers} header fields.",
                    base=self.limits.problem_base,
                )
            )
            head = [STATUS_LINE[HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE]]
            head += [b"%s: %s\r\n" % pair for pair in self.server_state.default_headers]
            head += [
                b"content-type: %s\r\n" % MEDIA_TYPE.encode(),
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
                body,
            ]
            self.transport.write(b"".join(head))
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._timer = None
        # Closes now, or once the answer to an earlier (pipelined) request is sent.
        self.shutdown()

    def _body_timed_out(self) -> None:
        self._timer = None
        if self.flow.read_paused:  # the app has not taken what it was sent: not the client's wait
            self._body_paused = True
            self._arm(self.limits.body_timeout, self._body_timed_out)
        elif self._body_paused:
            # The app took it during this period, maybe a moment ago, and the rest may not have
            # been read yet (a busy loop): the client gets a whole period from now.
            self._body_paused = False
            self._arm(self.limits.body_timeout, self._body_timed_out)
        else:
            self.transport.close()

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._timer = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None


def limited_protocol(limits: ServerLimits) -> type[LimitedProtocol]:
    """The protocol class for uvicorn's `Config(http=...)`, bound to `limits`."""
    return type("LimitedProtocol", (LimitedProtocol,), {"limits": limits})
