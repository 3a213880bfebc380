"""The idempotency pillar's port: what a middleware needs from a record store.

Two halves. `RecordStore`, which every store has (SQL or Redis): claim, complete and release,
each committed on its own (plain mode). `TransactionalRecordStore`, which a store in the app's
own database adds: the key read (and held, where the database can) in the handler's
transaction, and the answer written in it, so that both commit together (transactional mode).
A store offers its second half through `RecordStore.transactional`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ustun.idempotency.records import Claim, Lookup, OverQuota, Record, StoredResponse
from ustun.store.uow import Held, UnitOfWork


class RecordStore(Protocol):
    """Records keyed by `(scope, key)`; every write after the claim is fenced by its lease token."""

    @property
    def transactional(self) -> TransactionalRecordStore | None:
        """This store's transactional half; None when it cannot write in the handler's
        transaction (it keeps its records elsewhere than the app's database)."""
        ...

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


class TransactionalRecordStore(RecordStore, Protocol):
    """Records in the app's own database, written in the transaction the handler writes in."""

    def hold(self) -> AbstractAsyncContextManager[Held]:
        """One transaction for a request, opened at its first statement: the handler's units of
        work join it, and it commits when the block ends (rolls back if it raises)."""
        ...

    async def look(self, held: Held, scope: str, key: str) -> Lookup:
        """Read the key before the handler runs. Where the database can, the key is held from
        the first statement of `held`'s transaction to its end; elsewhere it is read alone."""
        ...

    async def settle_in(
        self,
        uow: UnitOfWork,
        scope: str,
        key: str,
        fingerprint: str,
        response: StoredResponse,
        *,
        ttl: float,
    ) -> Record | None:
        """Claim and complete a free key in one write of `uow`'s transaction: None when it is
        ours now, else the record found there first (then roll `uow` back)."""
        ...

    async def settle(
        self, scope: str, key: str, fingerprint: str, response: StoredResponse, *, ttl: float
    ) -> Record | None:
        """`settle_in` in a transaction of its own."""
        ...

    async def complete_in(
        self,
        uow: UnitOfWork,
        scope: str,
        key: str,
        lease_token: str,
        response: StoredResponse,
        *,
        ttl: float,
    ) -> bool:
        """Store the response of a claim in `uow`'s transaction; False when the lease was lost."""
        ...

    async def read(self, scope: str, key: str) -> Record | None:
        """The live record of a key, if any (an expired one counts as absent)."""
        ...

    async def over_quota(self, scope: str) -> OverQuota:
        """The refusal of a new key of `scope`, at its quota: when to come back."""
        ...
