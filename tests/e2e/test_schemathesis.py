"""Schemathesis against `/openapi.json` of a real `ustun serve`: every route, authenticated.

No answer may be a 5xx, use an undocumented status or content type, or break its schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from support import BACKENDS, Server, drop_pg_database, make_pg_database, wait_for

pytestmark = pytest.mark.e2e

EXAMPLES = 40  # per operation; the whole run stays well under a minute
KEY = re.compile(r"ustun_sk_[A-Za-z0-9_-]{43}")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass
class Target:
    """A running server and a key to call it with."""

    base_url: str
    key: str


@pytest.fixture(scope="module", params=BACKENDS)
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("fuzz")
    if request.param == "sqlite":
        name, url = None, f"sqlite:///{tmp / 'ustun.db'}"
    else:
        name, url = make_pg_database()
    server = Server(url, tmp / "serve.log", USTUN_WEBHOOK_ALLOW_PRIVATE="1").start()
    try:
        key = wait_for(lambda: KEY.search(server.output()), what="the first API key").group()
        yield Target(server.base_url, key)
    finally:
        server.stop()
        if name is not None:
            drop_pg_database(name)


def test_every_route_keeps_its_contract(target: Target) -> None:
    api = schemathesis.openapi.from_url(f"{target.base_url}/openapi.json")
    auth = {"authorization": f"Bearer {target.key}"}
    failures: list[str] = []
    operations = [result.ok() for result in api.get_all_operations()]
    assert operations

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def keeps_contract(case: schemathesis.Case) -> None:
            response = case.call(base_url=target.base_url, headers=auth, timeout=30)
            case.validate_response(response, checks=CHECKS)

        try:
            keeps_contract()
        except Exception as exc:  # every finding is reported together below
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
