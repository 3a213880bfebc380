"""A key revoked while a request with it is being checked: the check, finished after the revoke,
must not put the key back in the process's cache (nor keep it there past the bound elsewhere)."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable

import httpx
import pytest
from starlette.responses import Response

from ustun.service.plumbing import admission
from ustun.service.plumbing.accounts import Credential, authenticate, revoke_key
from ustun.service.plumbing.admission import KEY_CACHE_SECONDS, Authenticator, KeyCache
from ustun.service.plumbing.auth_failures import FailureLimiter
from ustun.store import Database


def _pause_after_the_read(
    monkeypatch: pytest.MonkeyPatch, key: str, then: Callable[[], Awaitable[None]]
) -> None:
    """Make the authenticator's check of `key` run `then` between its database read and its end."""

    async def check(db: Database, presented: str) -> Credential | None:
        credential = await authenticate(db, presented)
        if presented == key:
            await then()
        return credential

    monkeypatch.setattr(admission, "authenticate", check)


async def test_a_key_revoked_during_its_check_is_refused_once_revoke_returns(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    spare = (await client.post("/v1/api-keys")).json()
    auth = {"authorization": f"Bearer {spare['key']}"}
    read, revoked = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        read.set()
        await revoked.wait()

    _pause_after_the_read(monkeypatch, spare["key"], hold)
    checking = asyncio.create_task(client.get("/v1/payments", headers=auth))
    await asyncio.wait_for(read.wait(), 10)  # the key was read, unrevoked
    assert (await client.delete(f"/v1/api-keys/{spare['id']}")).status_code == 204
    revoked.set()
    # Checked before the revoke, this request passes; nothing after it may.
    assert (await asyncio.wait_for(checking, 10)).status_code == 200
    assert (await client.get("/v1/payments", headers=auth)).status_code == 401


class FakeClock:
    """Stands in for the `time` module of the authenticator: `monotonic()` moves when told."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


async def test_a_key_revoked_elsewhere_during_its_check_expires_within_the_bound(
    db: Database, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(admission, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    credential = await authenticate(db, api_key)
    assert credential is not None

    async def revoked_elsewhere_then_slow() -> None:
        # Another process revokes (this one's cache is not told); this check then takes 3 s.
        await revoke_key(db, credential.key_id)
        clock.now += 3

    _pause_after_the_read(monkeypatch, api_key, revoked_elsewhere_then_slow)

    auth = Authenticator(db, cache=KeyCache(), failures=FailureLimiter(100, 60))
    scope = {"type": "http", "headers": [(b"authorization", f"Bearer {api_key}".encode())]}

    async def status() -> int:
        checked = await auth.check(dict(scope))
        return checked.status_code if isinstance(checked, Response) else 200

    assert await status() == 200  # read before the revoke
    # The bound counts from the read that saw the key valid, not from when its check ended.
    clock.now += KEY_CACHE_SECONDS - 3 + 0.01
    assert await status() == 401
