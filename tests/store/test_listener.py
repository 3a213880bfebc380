"""Shared wake-ups: a doorbell rings every subscriber; a listener hears NOTIFY, reconnects."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from job_kinds import eventually
from ustun.store import Database
from ustun.store.listen import Doorbell, Listener


def test_a_doorbell_rings_every_subscriber_until_it_unsubscribes() -> None:
    bell = Doorbell()
    first, second = asyncio.Event(), asyncio.Event()
    bell.subscribe(first)
    bell.subscribe(second)
    bell.ring()
    assert (first.is_set(), second.is_set()) == (True, True)
    first.clear()
    second.clear()
    bell.unsubscribe(first)
    bell.ring()
    assert (first.is_set(), second.is_set()) == (False, True)


async def test_a_listener_hears_notifications_and_reconnects_after_losing_its_connection(
    pg: Database,
) -> None:
    channel = f"test_{uuid.uuid4().hex[:12]}"
    heard: list[str] = []
    pids: list[int] = []
    closed: list[int] = []

    async def connected(conn: asyncpg.Connection) -> None:
        pids.append(conn.get_server_pid())

    async def closing(conn: asyncpg.Connection) -> None:
        closed.append(conn.get_server_pid())

    listener = Listener(
        pg.dsn, channel, lambda: heard.append("wake"), on_connect=connected, on_close=closing
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(listener.run(stopping))
    admin = await asyncpg.connect(pg.dsn)
    try:

        async def woken(times: int) -> bool:
            return len(heard) >= times

        await eventually(lambda: woken(1), what="the wake-up on connecting")
        await admin.execute(f"NOTIFY {channel}")
        await eventually(lambda: woken(2), what="a notification")
        async with listener.connection() as conn:
            assert conn is not None
        await admin.execute("SELECT pg_terminate_backend($1)", pids[0])

        async def reconnected() -> bool:
            return len(pids) == 2 and len(heard) >= 3

        await eventually(reconnected, what="the listener to reconnect and wake")
        assert closed == [pids[0]]
        await admin.execute(f"NOTIFY {channel}")
        await eventually(lambda: woken(4), what="a notification on the new connection")
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await admin.close()
    assert closed == pids
    async with listener.connection() as conn:
        assert conn is None
