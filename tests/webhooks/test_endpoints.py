"""How long a dispatcher may keep an endpoint it decrypted."""

from __future__ import annotations

from datetime import datetime, timedelta

from ustun import clock
from ustun.http.signature import Secret
from ustun.webhooks.endpoints import Target


def _target(version: int, signing_until: datetime | None) -> Target:
    signing = (Secret.generate(), Secret.generate()) if signing_until else (Secret.generate(),)
    url = "https://example.com/hook"
    return Target("we_1", "acc_1", url, "full", True, 8, None, signing, version, signing_until)


def test_a_new_version_makes_it_stale() -> None:
    now = clock.now()
    target = _target(3, None)
    assert target.current(3, now + timedelta(days=400))
    assert not target.current(4, now)


def test_it_goes_stale_when_the_previous_secret_stops_signing() -> None:
    now = clock.now()
    target = _target(3, now + timedelta(seconds=1))
    assert target.current(3, now)
    assert not target.current(3, now + timedelta(seconds=1))
