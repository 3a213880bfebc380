"""`HostedKeys`, idempotency in a host's own transaction, on plain DB-API connections (sqlite3,
psycopg 3) as Django's and Flask's run it: the handler's writes and its answer commit together,
or neither does."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy.engine import make_url

from ustun.idempotency.decision import Refuse
from ustun.idempotency.hosted import HostedKeys, Replayed
from ustun.idempotency.records import StoredResponse
from ustun.store.dbapi import DbapiConnection

Answer = StoredResponse


class Host:
    """A connection in autocommit mode whose `atomic()` is one transaction, as a framework's."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.sqlite = parsed.get_backend_name() == "sqlite"
        if self.sqlite:
            self.raw: object = sqlite3.connect(str(parsed.database), isolation_level=None)
            self.conn = DbapiConnection(self.raw, "sqlite")
        else:
            dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
            self.raw = psycopg.connect(dsn, autocommit=True)
            self.conn = DbapiConnection(self.raw, "postgresql")
        self.execute("CREATE TABLE IF NOT EXISTS hosted_rows (scope VARCHAR(64))")

    def execute(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        with self.conn.cursor() as cursor:
            cursor.execute(sql.replace("?", "?" if self.sqlite else "%s"), args)
            return list(cursor.fetchall()) if cursor.description else []

    @contextmanager
    def atomic(self) -> Iterator[None]:
        if not self.sqlite:
            with self.raw.transaction():  # type: ignore[attr-defined]
                yield
            return
        self.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    def rows(self, scope: str) -> int:
        [(n,)] = self.execute("SELECT count(*) FROM hosted_rows WHERE scope = ?", scope)
        return int(n)  # type: ignore[call-overload]


@pytest.fixture
def host(database_url: str) -> Iterator[Host]:
    made = Host(database_url)
    yield made
    made.raw.close()  # type: ignore[attr-defined]


def _keys(host: Host, max_body: int = 1024) -> HostedKeys:
    return HostedKeys(connection=lambda: host.conn, atomic=host.atomic, max_body=max_body)


def _call(host: Host, keys: HostedKeys, scope: str, body: bytes, answer: Answer) -> object:
    """Under key `k`, a handler that writes a row of `scope` and answers `answer`."""
    request = keys.request(scope, "k", method="POST", path="/x", query=b"", body=body)

    def handler() -> Answer:
        host.execute("INSERT INTO hosted_rows (scope) VALUES (?)", scope)
        return answer

    return keys.call(request, handler, lambda response: response)


CREATED = StoredResponse(201, (("content-type", "application/json"),), b'{"id": 1}')


def test_runs_once_then_replays_and_refuses_another_body(host: Host) -> None:
    keys, scope = _keys(host), str(uuid.uuid4())
    assert _call(host, keys, scope, b"{}", CREATED) == CREATED
    again = _call(host, keys, scope, b"{}", CREATED)
    assert again == Replayed(CREATED, CREATED.body)
    other = _call(host, keys, scope, b'{"a": 1}', CREATED)
    assert isinstance(other, Refuse)
    assert other.slug == "idempotency-key-reused"
    assert host.rows(scope) == 1


def test_a_raising_handler_leaves_nothing_and_the_key_free(host: Host) -> None:
    keys, scope = _keys(host), str(uuid.uuid4())
    request = keys.request(scope, "k", method="POST", path="/x", query=b"", body=b"")

    def failing() -> Answer:
        host.execute("INSERT INTO hosted_rows (scope) VALUES (?)", scope)
        raise RuntimeError("after writing")

    with pytest.raises(RuntimeError):
        keys.call(request, failing, lambda response: response)
    assert host.rows(scope) == 0
    assert _call(host, keys, scope, b"", CREATED) == CREATED


def test_a_5xx_rolls_back_and_a_stored_4xx_keeps_no_writes(host: Host) -> None:
    keys, failed, refused = _keys(host), str(uuid.uuid4()), str(uuid.uuid4())
    broken = StoredResponse(503, (), b"down")
    assert _call(host, keys, failed, b"", broken) == broken
    assert host.rows(failed) == 0
    assert _call(host, keys, failed, b"", CREATED) == CREATED  # the key was free
    conflict = StoredResponse(409, (), b"no")
    assert _call(host, keys, refused, b"", conflict) == conflict
    assert host.rows(refused) == 0
    assert _call(host, keys, refused, b"", CREATED) == Replayed(conflict, b"no")


def test_a_body_over_max_body_is_not_kept(host: Host) -> None:
    keys, scope = _keys(host, max_body=4), str(uuid.uuid4())
    assert _call(host, keys, scope, b"", CREATED) == CREATED
    replay = _call(host, keys, scope, b"", CREATED)
    assert isinstance(replay, Refuse)
    assert replay.slug == "idempotency-response-unavailable"
    assert host.rows(scope) == 1
