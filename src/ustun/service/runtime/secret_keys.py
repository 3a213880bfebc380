"""The secret key against what is stored under it: the startup check, and `ustun rotate-key`.

Sealed at rest: every webhook endpoint's signing secrets, broker URL, client certificate key
and OAuth2 client secret, and the stored body of an idempotent response marked `no-store` (see
`ustun.idempotency.sealing`). A process whose key opens none of them would start and then fail
every delivery, so startup opens every endpoint secret first.

The fingerprints of idempotency keys (`ustun.keys.fingerprint_keys`) are not re-keyed (a
keyed hash cannot be): one made under the previous key is still checked while
`USTUN_SECRET_KEY_PREVIOUS` is set, and afterwards cannot be, so its key's retry replays until
the record expires.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ustun.errors import SecretKeyError
from ustun.idempotency.sealing import context
from ustun.idempotency.sql import SqlRecordStore
from ustun.settings import Settings
from ustun.store import Database, UnitOfWork
from ustun.webhooks.adapters import for_database
from ustun.webhooks.records import Sealed
from ustun.webhooks.secretbox import SecretBox, key_file


@dataclass(frozen=True, slots=True)
class Resealed:
    """What `reseal` re-encrypted."""

    endpoint_secrets: int
    responses: int


def key_mismatch(settings: Settings) -> SecretKeyError:
    """The error for stored secrets the configured key(s) cannot open: where the key came from."""
    generated = key_file(settings.database_url)
    if settings.secret_key is None:
        source = f"the key generated in {generated}" if generated else "the generated key"
        fix = "set USTUN_SECRET_KEY to the key they were sealed with"
    else:
        source = "USTUN_SECRET_KEY"
        old = (
            f" (the contents of {generated})"
            if generated is not None and generated.exists()
            else ""
        )
        fix = (
            f"to change keys, set USTUN_SECRET_KEY_PREVIOUS to the old key{old} "
            "and run `ustun rotate-key`"
        )
    if settings.secret_key_previous is not None:
        source += " (nor USTUN_SECRET_KEY_PREVIOUS)"
    return SecretKeyError(
        f"{source} does not open the webhook secrets stored in the database: they were sealed "
        f"under another key.\n{fix[0].upper()}{fix[1:]}."
    )


async def check(db: Database, box: SecretBox, settings: Settings) -> None:
    """Raise `key_mismatch` unless `box` opens every stored endpoint secret."""
    async with db.read() as conn:
        rows = await for_database(db).sealed(conn, lock=False)
    try:
        for row in rows:
            for sealed in filter(None, row[1:]):
                box.open(sealed, context=row.id)
    except SecretKeyError:
        raise key_mismatch(settings) from None


async def reseal(db: Database, box: SecretBox, settings: Settings) -> Resealed:
    """Re-encrypt every sealed value under the box's current key, in one transaction.

    Rows are locked as they are read, so a secret rotated meanwhile is not overwritten.
    """
    try:
        async with db.unit_of_work() as uow:
            return Resealed(
                await _reseal_endpoints(db, uow, box),
                await _reseal_responses(uow, box, SqlRecordStore(db, create_tables=False)),
            )
    except SecretKeyError:
        raise key_mismatch(settings) from None


async def _reseal_endpoints(db: Database, uow: UnitOfWork, box: SecretBox) -> int:
    def again(sealed: str | None, endpoint_id: str) -> str | None:
        if sealed is None:
            return None
        return box.seal(box.open(sealed, context=endpoint_id), context=endpoint_id)

    store = for_database(db)
    rows = await store.sealed(uow.conn, lock=True)
    for row in rows:
        await store.reseal(uow, Sealed._make((row.id, *(again(v, row.id) for v in row[1:]))))
    return len(rows)


async def _reseal_responses(uow: UnitOfWork, box: SecretBox, answers: SqlRecordStore) -> int:
    """The stored bodies of `no-store` responses: the only ones kept sealed."""
    sealed = await answers.sealed_answers(uow)
    for answer in sealed:
        where = context(answer.scope, answer.key)
        body = box.seal_bytes(box.open_bytes(answer.body, context=where), context=where)
        await answers.reseal_answer(uow, replace(answer, body=body))
    return len(sealed)
