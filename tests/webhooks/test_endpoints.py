"""How long a dispatcher may keep an endpoint it decrypted; which secrets sign after rotations."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from ustun import clock
from ustun.http.signature import Secret
from ustun.store import Database
from ustun.webhooks import endpoints as ops
from ustun.webhooks.endpoints import ROTATION_OVERLAP, Target, signing_secrets
from ustun.webhooks.secretbox import SecretBox
from ustun.webhooks.tables import endpoints
from webhook_support import MakeEndpoint


def _target(version: int, signing_until: datetime | None) -> Target:
    signing = (Secret.generate(), Secret.generate()) if signing_until else (Secret.generate(),)
    url = "https://example.com/hook"
    return Target("we_1", "acc_1", url, "full", True, None, signing, version, signing_until)


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


async def test_a_second_rotation_drops_the_first_old_secret_and_keeps_the_newest_previous(
    db: Database, box: SecretBox, make_endpoint: MakeEndpoint
) -> None:
    endpoint_id, original = await make_endpoint("https://example.com/hook")
    load = select(endpoints).where(endpoints.c.id == endpoint_id)
    rotated = []
    for _ in range(2):
        async with db.unit_of_work() as uow:
            row = (await uow.conn.execute(load)).one()
            rotated.append(str(await ops.rotate(uow, box, row)))
    async with db.read() as conn:
        row = (await conn.execute(load)).one()
    now = clock.now()
    signing = [str(s) for s in signing_secrets(box, row, now)]
    assert signing == [rotated[1], rotated[0]]  # the original stopped signing at once
    assert original not in signing
    # The grace period of the newest previous secret starts again at the second rotation.
    assert row.previous_secret_expires_at > now + ROTATION_OVERLAP - timedelta(minutes=1)
    later = signing_secrets(box, row, row.previous_secret_expires_at)
    assert [str(s) for s in later] == [rotated[1]]
