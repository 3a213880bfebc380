"""Deliveries to endpoints that authenticate ustun, through the dispatcher on SQLite and
PostgreSQL: a client certificate presented to a local HTTPS receiver that requires one (and a
certificate it does not trust refused, the refusal recorded as the attempt's error), and an
OAuth2 bearer token from a local token server, fetched once for many deliveries and once more
after the receiver stops taking it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trustme

from oauth2_support import Authority, serving_authority
from tls_support import CLIENT_NAME, MutualTls, client_pems, mutual_tls
from ustun.store import Database
from ustun.webhooks import endpoint_auth
from ustun.webhooks.sending.dispatcher import Dispatcher
from webhook_support import MakeEndpoint, attempts_of, send, settled


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def receiver(ca: trustme.CA) -> AsyncIterator[MutualTls]:
    async with mutual_tls(ca) as served:
        yield served


@pytest.fixture
async def authority() -> AsyncIterator[Authority]:
    async with serving_authority() as served:
        yield served


async def test_the_endpoints_client_certificate_opens_the_receiver(
    db: Database,
    account_id: str,
    ca: trustme.CA,
    receiver: MutualTls,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    await make_endpoint(receiver.url(), mtls=endpoint_auth.client_certificate(**client_pems(ca)))
    row = await settled(db, await send(db, account_id, "payment.created"), "succeeded")
    assert row.attempt_count == 1
    assert len(receiver.seen) == 1
    assert CLIENT_NAME in receiver.seen[0]


async def test_a_certificate_the_receiver_does_not_trust_is_a_failed_attempt_saying_so(
    db: Database,
    account_id: str,
    ca: trustme.CA,
    receiver: MutualTls,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    stranger = client_pems(trustme.CA())  # a client certificate of another authority
    cert = endpoint_auth.client_certificate(
        stranger["certificate"], stranger["private_key"], ca.cert_pem.bytes().decode()
    )
    await make_endpoint(receiver.url(), mtls=cert)
    row = await settled(db, await send(db, account_id, "payment.created"), "dead")
    tried = await attempts_of(db, row.id)
    assert tried
    assert all(a.status_code is None for a in tried)
    # TLS 1.3: the receiver's alert, or its reset when that comes first.
    assert all(
        "unknown ca" in (a.error or "") or "Connection reset" in (a.error or "") for a in tried
    ), [a.error for a in tried]
    assert receiver.seen == []


async def test_an_oauth2_token_is_fetched_once_and_again_after_a_401(
    db: Database,
    account_id: str,
    authority: Authority,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    await make_endpoint(authority.url("/hook"), oauth2=authority.credentials())
    first = [await send(db, account_id, "payment.created", n=n) for n in range(5)]
    for event_id in first:
        await settled(db, event_id, "succeeded")
    assert len(authority.token_requests) == 1
    assert set(authority.hooks) == {"Bearer tok-0"}

    authority.valid = "revoked"  # the receiver stops taking the token the worker holds
    row = await settled(db, await send(db, account_id, "payment.created"), "succeeded")
    assert row.attempt_count == 1  # the new token was fetched within the same attempt
    assert len(authority.token_requests) == 2
    assert authority.hooks[-2:] == ["Bearer tok-0", "Bearer tok-1"]


async def test_a_token_endpoint_that_refuses_is_a_failed_attempt_saying_so(
    db: Database,
    account_id: str,
    authority: Authority,
    make_endpoint: MakeEndpoint,
    dispatcher: Dispatcher,
) -> None:
    authority.answer = (401, {"error": "invalid_client"})
    await make_endpoint(authority.url("/hook"), oauth2=authority.credentials())
    row = await settled(db, await send(db, account_id, "payment.created"), "dead")
    tried = await attempts_of(db, row.id)
    assert {a.error for a in tried} == {"oauth2: the token endpoint answered 401: invalid_client"}
    assert authority.hooks == []
