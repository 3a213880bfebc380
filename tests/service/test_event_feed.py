"""`GET /v1/events?after=`: the feed a receiver reconciles against, over HTTP (both backends)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx

from ustun.service.plumbing.accounts import account_for_key, create_key
from ustun.store import Database
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


async def _feed(client: httpx.AsyncClient, **params: object) -> tuple[list[str], str]:
    """Every event id of the feed from `params`, page by page, and the cursor it ends at."""
    seen: list[str] = []
    while True:
        answer = await client.get("/v1/events", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert isinstance(body["next_cursor"], str)
        seen += [event["id"] for event in body["data"]]
        params = {**params, "after": body["next_cursor"]}
        if len(body["data"]) < int(str(params["limit"])):
            return seen, body["next_cursor"]


async def _feed_soon(client: httpx.AsyncClient, expected: list[str], **params: object) -> str:
    """Wait until the feed from `params` gives `expected`; the cursor it ends at. On PostgreSQL
    any transaction still open on the server (other tests' too) holds the feed back a while."""
    found: tuple[list[str], str] = ([], "")

    async def arrived() -> bool:
        nonlocal found
        found = await _feed(client, **params)
        assert found[0] == expected[: len(found[0])], found[0]
        return found[0] == expected

    await until(arrived, within=60, what=f"the feed to give {expected}")
    return found[1]


async def test_the_feed_pages_oldest_first_and_resumes_from_its_cursor(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    emitted = await _emit(db, api_key, "payment.created", "payment.succeeded", "ping", "ping")
    cursor = await _feed_soon(client, emitted, after="0", limit=3)
    newest_first = (await client.get("/v1/events")).json()
    assert [e["id"] for e in newest_first["data"]] == emitted[::-1]
    assert newest_first["next_cursor"] is None

    assert (await _feed(client, after=cursor, limit=3))[0] == []
    more = await _emit(db, api_key, "payment.failed")
    await _feed_soon(client, more, after=cursor, limit=3)
    await _feed_soon(client, emitted[2:], after="0", limit=1, type="ping")
    event = (await client.get("/v1/events", params={"after": "0", "limit": 1})).json()["data"][0]
    assert event == (await client.get(f"/v1/events/{emitted[0]}")).json()


async def test_the_feed_shows_only_the_callers_events(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    other = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    await _emit(db, other, "payment.created")
    mine = await _emit(db, api_key, "payment.created")
    await _feed_soon(client, mine, after="0", limit=100)


async def test_since_starts_the_feed_at_a_time(
    client: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    await _emit(db, api_key, "payment.created")
    cut = datetime.now(UTC)
    later = await _emit(db, api_key, "payment.succeeded")
    await _feed_soon(client, later, since=cut.isoformat(), limit=10)
    earlier = (cut - timedelta(hours=1)).isoformat()
    assert len((await _feed(client, since=earlier, limit=10))[0]) == 2
    for not_rfc3339 in ("0.5", cut.date().isoformat(), cut.replace(tzinfo=None).isoformat()):
        refused = await client.get("/v1/events", params={"since": not_rfc3339})
        assert refused.status_code == 422, not_rfc3339
        assert refused.json()["errors"][0]["field"] == "query.since"


async def test_a_cursor_it_did_not_make_is_a_problem(client: httpx.AsyncClient) -> None:
    for bad in ("evc_nope", "pay_123", "evc_" + "f" * 32):
        refused = await client.get("/v1/events", params={"after": bad})
        assert refused.status_code == 400, bad
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"].endswith("/problems/event-cursor-invalid")
