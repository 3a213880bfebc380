"""Instrumentation hooks: events reach every hook; a broken hook never breaks the caller."""

from __future__ import annotations

import pytest

from ustun import instrumentation
from ustun.instrumentation import Event


def test_events_reach_hooks_until_removed() -> None:
    seen: list[Event] = []
    remove = instrumentation.add_hook(seen.append)
    instrumentation.emit("delivery_attempt", 0.25, outcome="succeeded")
    remove()
    instrumentation.emit("delivery_attempt", 0.5, outcome="failed")
    assert seen == [Event("delivery_attempt", {"outcome": "succeeded"}, 0.25)]


def test_a_failing_hook_is_logged_and_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("hook bug")

    removers = [instrumentation.add_hook(broken), instrumentation.add_hook(seen.append)]
    try:
        instrumentation.emit("idempotency", outcome="replayed")
    finally:
        for remove in removers:
            remove()
    assert [e.labels["outcome"] for e in seen] == ["replayed"]
    assert "hook bug" in caplog.text
