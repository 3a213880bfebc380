"""What the middleware needs from a record store (SQL or Redis)."""

from __future__ import annotations

from typing import Protocol

from ustun.idempotency.records import Claim, StoredResponse


class RecordStore(Protocol):
    """Records keyed by `(scope, key)`; every write after the claim is fenced by its lease token."""

    async def prepare(self) -> None:
        """Make the store ready (its tables exist); run once, before the first request."""
        ...

    async def claim(
        self, scope: str, key: str, fingerprint: str, *, lease: float, ttl: float
    ) -> Claim:
        """Hold the key as in progress (or take over an expired lease), or return what is there."""
        ...

    async def complete(
        self, scope: str, key: str, lease_token: str, response: StoredResponse, *, ttl: float
    ) -> bool:
        """Store the response if the lease is still ours; False when it was lost."""
        ...

    async def release(self, scope: str, key: str, lease_token: str) -> None:
        """Forget the claim (if still ours) so that a retry executes afresh."""
        ...
