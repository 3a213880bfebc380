"""The feed's cursor tells an account nothing about the others (both backends): it names the
account's own last event, never the global horizon (another account's writes, and on
PostgreSQL the server's transaction counter), and it still never skips a later event."""

from __future__ import annotations

import uuid

import httpx

from support import problem_of
from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
from ustun.webhooks import feed
from ustun.webhooks.sending.outbox import emit
from webhook_support import until


async def _emit(db: Database, api_key: str, *types: str) -> list[str]:
    account = await account_for_key(db, api_key)
    assert account is not None
    emitted = []
    for n, event_type in enumerate(types):
        async with db.unit_of_work() as uow:
            emitted.append(await emit(uow, account.id, event_type, {"id": f"pay_{n}"}))
    return emitted


async def _page(client: httpx.AsyncClient, **params: str) -> tuple[list[str], str]:
    answer = await client.get("/v1/events", params={"limit": "10", **params})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return [event["id"] for event in body["data"]], body["next_cursor"]


async def _page_soon(
    client: httpx.AsyncClient, expected: list[str], **params: str
) -> tuple[list[str], str]:
    """The page from `params` once it gives `expected`: on PostgreSQL any transaction still
    open on the server (other tests' too) holds the feed back a while."""

    async def arrived() -> tuple[list[str], str] | None:
        page = await _page(client, **params)
        return page if page[0] == expected else None

    found: tuple[list[str], str] = await until(
        arrived, within=60, what=f"the feed to give {expected}"
    )
    return found


async def test_a_cursor_does_not_move_when_only_another_account_writes(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    other_key = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    async with httpx.AsyncClient(
        transport=client._transport,
        base_url=client.base_url,
        headers={"authorization": f"Bearer {other_key}"},
    ) as other:
        mine = await _emit(db, api_key, "payment.created", "ping")
        _, cursor = await _page_soon(client, mine, after="0")
        _, pinged = await _page_soon(client, [mine[1]], after="0", type="ping")

        theirs = await _emit(db, other_key, "payment.created", "payment.created", "ping")
        # Their events are below the horizon now: a cursor on it would have moved past them.
        await _page_soon(other, theirs, after="0")
        assert await _page(client, after=cursor) == ([], cursor)
        assert await _page(client, after=pinged, type="ping") == ([], pinged)
        assert cursor == pinged == feed.CURSOR_PREFIX + mine[1]  # my own last event
        for id_of_theirs in theirs:  # nor does a cursor on their events work for me
            refused = await client.get("/v1/events", params={"after": f"evc_{id_of_theirs}"})
            problem_of(refused, 400, "event-cursor-invalid")

        later = await _emit(db, api_key, "payment.succeeded", "ping")
        await _page_soon(client, later, after=cursor)
        _, filtered = await _page_soon(client, [later[1]], after=cursor, type="ping")
        assert filtered == feed.CURSOR_PREFIX + later[1]


async def test_a_filtered_short_page_moves_to_the_accounts_last_event_of_any_type(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    """The events a filter passed over are not read again, and none after them is skipped."""
    created = await _emit(db, api_key, "payment.created", "payment.created")
    await _page_soon(client, created, after="0")

    async def moved() -> str | None:
        ids, cursor = await _page(client, after="0", type="ping")
        assert ids == []
        return cursor if cursor == feed.CURSOR_PREFIX + created[1] else None

    cursor: str = await until(moved, within=10, what="the cursor to name the last event")
    pinged = await _emit(db, api_key, "ping")
    await _page_soon(client, pinged, after=cursor, type="ping")


async def test_a_cursor_made_before_cursors_named_events_is_still_read(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    """A reconciler keeps its cursor across a server upgrade."""
    mine = await _emit(db, api_key, "ping", "ping")
    await _page_soon(client, mine, after=feed.START.cursor)
    assert (await _page(client, after=feed.Position(2**62, 0).cursor)) == (
        [],
        feed.Position(2**62, 0).cursor,
    )
