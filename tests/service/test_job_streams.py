"""Job event streams share the process's one reader: open streams run no statement on the pool
requests use, and the reader's statements do not grow with the number of streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, event, update

from ustun import clock, jobs
from ustun.http.sse_parser import Event, EventStreamParser
from ustun.jobs.tables import jobs as jobs_table
from ustun.jobs.watch import LOOP_NAME
from ustun.service import create_app
from ustun.service.plumbing.accounts import account_for_key
from ustun.settings import Settings
from ustun.store import Database

STREAMS = 40
WINDOW = 1.0  # seconds of open streams measured


@pytest.fixture
async def app(settings: Settings, db: Database) -> AsyncIterator[FastAPI]:
    """The service in-process, lifespan included, with room for every stream of a test, all
    opening at once (past its requests in flight an account's streams open a few at a time)."""
    room = 2 * STREAMS
    roomy = settings.model_copy(
        update={"max_streams_per_account": room, "max_requests_in_flight": room}
    )
    service = create_app(roomy, db=db)
    async with service.router.lifespan_context(service):
        yield service


@pytest.fixture
async def http(app: FastAPI, api_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app` with the test account's key."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    ) as client:
        yield client


@contextmanager
def counted() -> Iterator[tuple[list[str], list[str]]]:
    """The statements run inside the block, on any engine: by the streams' loop, and by
    anything else (requests, on the pools they share)."""
    loop: list[str] = []
    others: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        task = asyncio.current_task()
        by_loop = task is not None and task.get_name() == LOOP_NAME
        (loop if by_loop else others).append(statement)

    event.listen(Engine, "before_cursor_execute", before)
    try:
        yield loop, others
    finally:
        event.remove(Engine, "before_cursor_execute", before)


async def _waiting_jobs(db: Database, api_key: str, count: int) -> list[jobs.Job]:
    """`count` jobs of the test account that no worker would take for an hour."""
    account = await account_for_key(db, api_key)
    assert account is not None
    later = clock.now() + timedelta(hours=1)
    return [
        await jobs.enqueue(db, "slow", account_id=account.id, run_at=later) for _ in range(count)
    ]


def _events(response: httpx.Response) -> list[Event]:
    assert response.status_code == 200, response.text
    return EventStreamParser().feed(response.content)


async def _cancel_and_collect(
    db: Database, made: list[jobs.Job], streams: list[asyncio.Task[httpx.Response]]
) -> None:
    """Cancel the jobs; each stream then ends with the creation and the cancellation."""
    assert not any(stream.done() for stream in streams)  # all stayed open until now
    for job in made:
        await jobs.cancel(db, job.id, account_id=job.account_id)
    answers = await asyncio.wait_for(asyncio.gather(*streams), 20)
    for answer in answers:
        assert [(e.id, e.event) for e in _events(answer)] == [("1", "status"), ("2", "status")]
        assert '"cancelled"' in _events(answer)[-1].data


async def test_open_streams_run_no_statement_on_the_request_pool(
    http: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    made = await _waiting_jobs(db, api_key, STREAMS)
    assert (await http.get(f"/v1/jobs/{made[0].id}")).status_code == 200  # the key is cached
    with counted() as (_, statements):
        streams = [asyncio.create_task(http.get(f"/v1/jobs/{j.id}/events")) for j in made]
        await asyncio.sleep(WINDOW)
    # Before, each stream ran two statements every 0.25 s: 120-230 in that second (loaded).
    assert statements == []
    await _cancel_and_collect(db, made, streams)


async def test_the_readers_statements_do_not_grow_with_the_streams(
    app: FastAPI, http: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    assert app.state.job_watch.reader is not db  # a database (and pools) of its own
    made = await _waiting_jobs(db, api_key, 1 + STREAMS)
    counts = []
    for watched in (made[:1], made[1:]):
        with counted() as (statements, _):
            streams = [asyncio.create_task(http.get(f"/v1/jobs/{j.id}/events")) for j in watched]
            await asyncio.sleep(WINDOW)
        counts.append(len(statements))
        await _cancel_and_collect(db, watched, streams)
    # About one read of the versions per 0.25 s, one more for the streams opening: 4-6 each.
    assert all(0 < count <= 2 * WINDOW / app.state.job_watch.interval + 2 for count in counts), (
        counts
    )


async def test_a_stream_catches_up_on_hundreds_of_events_in_order(
    http: httpx.AsyncClient, db: Database, api_key: str
) -> None:
    [job] = await _waiting_jobs(db, api_key, 1)
    for progress in range(1, 251):  # 250 progress events: more than one read's window
        async with db.unit_of_work() as uow:
            await uow.conn.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job.id)
                .values(progress=progress % 100, version=jobs_table.c.version + 1)
            )
    stream = asyncio.create_task(
        http.get(f"/v1/jobs/{job.id}/events", headers={"last-event-id": "0"})
    )
    await jobs.cancel(db, job.id, account_id=job.account_id)
    events = _events(await asyncio.wait_for(stream, 20))
    assert [int(e.id) for e in events] == list(range(1, 253))
    assert [e.event for e in events[1:-1]] == ["progress"] * 250
    assert '"cancelled"' in events[-1].data
