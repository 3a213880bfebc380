"""OAuth2 client credentials against a local token server and receiver of the test's own: one
token shared by many deliveries, replaced shortly before it expires, fetched again once on a
401, and every way of not getting one an outcome that says why."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from oauth2_support import Authority, serving_authority
from ustun.webhooks.sending import oauth2, transport
from ustun.webhooks.sending.oauth2 import TokenError, Tokens


@pytest.fixture
async def authority() -> AsyncIterator[Authority]:
    async with serving_authority() as served:
        yield served


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with transport.session(timeout=5, allow_private=True, limit=16) as session:
        yield session


async def deliver(
    http: aiohttp.ClientSession, tokens: Tokens, authority: Authority
) -> transport.Outcome:
    return await oauth2.post(
        http,
        tokens,
        authority.credentials(),
        authority.url("/hook"),
        b"{}",
        {},
        allow_private=True,
    )


async def test_one_token_serves_many_deliveries_fetched_once_with_basic_auth(
    http: aiohttp.ClientSession, authority: Authority
) -> None:
    tokens = Tokens(allow_private=True)
    outcomes = await asyncio.gather(*(deliver(http, tokens, authority) for _ in range(20)))
    assert [o.status for o in outcomes] == [200] * 20
    assert len(authority.token_requests) == 1  # one fetch, however many waited for it
    [asked] = authority.token_requests
    # RFC 6749 §2.3.1: id and secret form-encoded, then HTTP Basic.
    assert asked["basic"] == "ustun%20client:s3cr%3Aet%2F%C3%A9"
    assert asked["form"] == {"grant_type": ["client_credentials"], "scope": ["hooks.write"]}
    assert asked["type"] == "application/x-www-form-urlencoded"
    assert set(authority.hooks) == {"Bearer tok-0"}


async def test_a_token_is_replaced_shortly_before_it_expires(
    http: aiohttp.ClientSession, authority: Authority
) -> None:
    authority.lifetime = 2  # replaced at half its life: 1 s after it was asked for
    tokens = Tokens(allow_private=True)
    assert (await deliver(http, tokens, authority)).status == 200
    assert (await deliver(http, tokens, authority)).status == 200
    assert len(authority.token_requests) == 1
    await asyncio.sleep(1.1)  # the time under test: past the point it is replaced at
    assert (await deliver(http, tokens, authority)).status == 200
    assert len(authority.token_requests) == 2


async def test_a_401_gets_one_new_token_and_one_more_try(
    http: aiohttp.ClientSession, authority: Authority
) -> None:
    tokens = Tokens(allow_private=True)
    assert (await deliver(http, tokens, authority)).status == 200
    authority.valid = "revoked-by-the-receiver"  # the held token is no longer taken
    got = await deliver(http, tokens, authority)
    assert got.status == 200  # after one more token
    assert len(authority.token_requests) == 2
    assert authority.hooks[-2:] == ["Bearer tok-0", "Bearer tok-1"]


async def test_a_receiver_that_keeps_refusing_gets_one_retry_not_a_loop(
    http: aiohttp.ClientSession, authority: Authority
) -> None:
    tokens = Tokens(allow_private=True)
    authority.answer = (200, {"access_token": "never-taken", "token_type": "bearer"})
    got = await deliver(http, tokens, authority)
    assert got.status == 401
    assert len(authority.hooks) == 2
    assert len(authority.token_requests) == 2


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ((401, {"error": "invalid_client"}), "the token endpoint answered 401: invalid_client"),
        ((500, {}), "the token endpoint answered 500"),
        ((200, {"token_type": "Bearer"}), "holds no access_token"),
        ((200, {"access_token": "t", "token_type": "mac"}), "the token type is 'mac', not Bearer"),
    ],
)
async def test_no_token_is_a_failed_attempt_that_says_why(
    http: aiohttp.ClientSession,
    authority: Authority,
    answer: tuple[int, dict[str, Any]],
    reason: str,
) -> None:
    authority.answer = answer
    got = await deliver(http, Tokens(allow_private=True), authority)
    assert got.status is None
    assert got.error is not None
    assert got.error.startswith("oauth2: ")
    assert reason in got.error
    assert authority.hooks == []  # nothing sent without a token


async def test_a_token_url_on_a_private_address_is_refused_before_any_request(
    http: aiohttp.ClientSession, authority: Authority
) -> None:
    with pytest.raises(TokenError, match="the token URL is refused: the URL must use https"):
        await Tokens(allow_private=False).bearer(http, authority.credentials())
    assert authority.token_requests == []
