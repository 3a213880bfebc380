"""Consumer portal sessions: opened by an operator key, scoped to one account and to the webhook
routes, refused once expired or revoked (both backends)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from support import problem_of
from ustun import clock, portal
from ustun.errors import ProblemError
from ustun.service.plumbing.accounts import create_key
from ustun.store import Database
from ustun.store.tables import portal_sessions
from ustun.webhooks.catalog import Catalog

HOOK = "https://hooks.example.com/portal"
MakeClient = Callable[[str], httpx.AsyncClient]


@dataclass
class Tenants:
    """An operator's client and two accounts (by name) with a client each."""

    operator: httpx.AsyncClient
    name: str
    own: httpx.AsyncClient
    other_name: str
    other: httpx.AsyncClient
    as_client: MakeClient

    async def link(self, **body: Any) -> dict[str, Any]:
        made = await self.operator.post("/v1/portal-sessions", json={"account": self.name, **body})
        assert made.status_code == 201, made.text
        found: dict[str, Any] = made.json()
        return found

    async def holder(self, **body: Any) -> httpx.AsyncClient:
        """A client that carries a new link's token, as the portal page does."""
        return self.as_client((await self.link(**body))["token"])


@pytest.fixture
async def tenants(client: httpx.AsyncClient, db: Database) -> AsyncIterator[Tenants]:
    opened: list[httpx.AsyncClient] = []

    def as_client(key: str) -> httpx.AsyncClient:
        http = httpx.AsyncClient(
            transport=client._transport,
            base_url=client.base_url,
            headers={"authorization": f"Bearer {key}"},
        )
        opened.append(http)
        return http

    suffix = uuid.uuid4().hex[:10]
    operator = await create_key(db, f"ops-{suffix}", operator=True)
    name, other_name = f"acme-{suffix}", f"globex-{suffix}"
    own, other = await create_key(db, name), await create_key(db, other_name)
    yield Tenants(
        as_client(operator), name, as_client(own), other_name, as_client(other), as_client
    )
    for http in opened:
        await http.aclose()


def _later(by: timedelta) -> Callable[[], datetime]:
    real = clock.now
    return lambda: real() + by


async def test_an_operator_opens_a_link_whose_token_acts_as_that_account(
    tenants: Tenants, db: Database
) -> None:
    mine = await tenants.own.post("/v1/webhook-endpoints", json={"url": HOOK})
    made = await tenants.operator.post("/v1/portal-sessions", json={"account": tenants.name})
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    body = made.json()
    assert made.headers["location"] == f"/v1/portal-sessions/{body['id']}"
    assert body["id"].startswith("ps_")
    assert body["object"] == "portal_session"
    assert body["account"] == tenants.name
    assert body["event_types"] is None
    assert body["revoked_at"] is None
    token = body["token"]
    assert token.startswith("ptl_")
    assert len(token) == 4 + 43
    assert body["url"] == f"http://127.0.0.1:8000/portal/#token={token}"
    life = datetime.fromisoformat(body["expires_at"]) - datetime.fromisoformat(body["created_at"])
    assert life == timedelta(seconds=portal.DEFAULT_TTL)

    listed = (await tenants.as_client(token).get("/v1/webhook-endpoints")).json()
    assert [e["id"] for e in listed["data"]] == [mine.json()["id"]]

    async with db.read() as conn:
        row = (
            await conn.execute(select(portal_sessions).where(portal_sessions.c.id == body["id"]))
        ).one()
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in [str(value) for value in row]
    assert row.created_by is not None
    assert row.created_by.startswith("key_")

    shown = (await tenants.operator.get(f"/v1/portal-sessions/{body['id']}")).json()
    assert shown == {k: v for k, v in body.items() if k not in ("token", "url")}


async def test_only_an_operator_key_opens_reads_or_revokes_a_session(tenants: Tenants) -> None:
    session = await tenants.link()
    for refused in (
        await tenants.own.post("/v1/portal-sessions", json={"account": tenants.name}),
        await tenants.own.get(f"/v1/portal-sessions/{session['id']}"),
        await tenants.own.delete(f"/v1/portal-sessions/{session['id']}"),
    ):
        problem = problem_of(refused, 403, "forbidden")
        assert "operator key" in problem["detail"]
    # The operator key is otherwise a key of its own account.
    assert (await tenants.operator.get("/v1/webhook-endpoints")).json()["data"] == []


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"account": "x", "extra": 1}, "body.extra", "Extra inputs"),
        ({}, "body.account", "Field required"),
        ({"account": 7}, "body.account", "string"),
        ({"account": "x", "ttl": "3600"}, "body.ttl", "integer"),
        ({"account": "x", "ttl": 59}, "body.ttl", "60"),
        ({"account": "x", "ttl": 7 * 86_400 + 1}, "body.ttl", "604800"),
        ({"account": "x", "ttl": 120.5}, "body.ttl", "integer"),
        ({"account": "x", "event_types": "payment.created"}, "body.event_types", "list"),
        ({"account": "x", "event_types": []}, "body.event_types", "at least 1"),
        ({"account": "x", "event_types": [3]}, "body.event_types.0", "string"),
    ],
)
async def test_a_bad_body_is_a_validation_error_naming_the_field(
    tenants: Tenants, body: dict[str, Any], field: str, says: str
) -> None:
    refused = await tenants.operator.post("/v1/portal-sessions", json=body)
    problem = problem_of(refused, 422, "validation-error")
    assert problem["errors"][0]["field"] == field, problem
    assert says in problem["errors"][0]["message"], problem


async def test_an_unknown_account_or_event_type_is_refused_by_name(tenants: Tenants) -> None:
    nobody = await tenants.operator.post("/v1/portal-sessions", json={"account": "no-such"})
    problem = problem_of(nobody, 422, "validation-error")
    assert problem["errors"][0]["field"] == "body.account"
    assert "'no-such'" in problem["detail"]
    unknown = await tenants.operator.post(
        "/v1/portal-sessions",
        json={"account": tenants.name, "event_types": ["payment.created", "payment.shipped"]},
    )
    problem = problem_of(unknown, 422, "validation-error")
    assert problem["errors"][0]["field"] == "body.event_types"
    assert "'payment.shipped'" in problem["detail"]


async def test_a_ttl_in_bounds_sets_the_end(tenants: Tenants) -> None:
    for ttl in (portal.MIN_TTL, portal.MAX_TTL, 600.0):
        made = await tenants.link(ttl=ttl)
        end = datetime.fromisoformat(made["expires_at"]) - datetime.fromisoformat(
            made["created_at"]
        )
        assert end == timedelta(seconds=ttl)


async def test_a_portal_token_reaches_the_webhook_routes_and_no_other(tenants: Tenants) -> None:
    holder = await tenants.holder()
    made = await holder.post("/v1/webhook-endpoints", json={"url": HOOK, "events": ["*"]})
    assert made.status_code == 201, made.text
    assert made.json()["secret"].startswith("whsec_")
    endpoint = made.json()["id"]
    path = f"/v1/webhook-endpoints/{endpoint}"
    tag = (await holder.get(path)).headers["etag"]
    assert (await holder.patch(path, json={"enabled": False}, headers={"if-match": tag})).is_success
    tag = (await holder.get(path)).headers["etag"]
    assert (await holder.patch(path, json={"enabled": True}, headers={"if-match": tag})).is_success
    assert (await holder.post(f"{path}/rotate-secret")).is_success
    ping = await holder.post(f"{path}/test")
    assert ping.status_code == 202, ping.text
    since = {"since": "2020-01-01T00:00:00Z"}
    assert (await holder.post(f"{path}/recover", json=since)).status_code == 202
    deliveries = (await holder.get("/v1/deliveries", params={"endpoint_id": endpoint})).json()
    delivery = deliveries["data"][0]["id"]
    assert (await holder.get(f"/v1/deliveries/{delivery}")).json()["attempts"] is not None
    assert (await holder.post(f"/v1/deliveries/{delivery}/retry")).status_code == 202
    assert (await holder.get("/v1/events")).json()["data"][0]["type"] == "ping"
    assert (await holder.get(f"/v1/events/{ping.json()['id']}")).is_success
    assert (await holder.get("/v1/event-types")).is_success

    for method, refused_path in (
        ("GET", "/v1/payments"),
        ("POST", "/v1/payments"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/api-keys"),
        ("POST", "/v1/api-keys"),
        ("POST", "/v1/portal-sessions"),
        ("DELETE", path),
        ("POST", f"/v1/events/{ping.json()['id']}/expunge"),
        ("GET", "/v1/documents/x"),
    ):
        refused = await holder.request(method, refused_path, json={})
        problem = problem_of(refused, 403, "forbidden")
        assert f"{method} {refused_path}" in problem["detail"]
        assert "API key" in problem["detail"]
    assert (await holder.get(path)).is_success  # the DELETE did nothing


async def test_a_portal_token_sees_nothing_of_another_account(tenants: Tenants) -> None:
    theirs = (await tenants.other.post("/v1/webhook-endpoints", json={"url": HOOK})).json()["id"]
    await tenants.other.post(f"/v1/webhook-endpoints/{theirs}/test")
    holder = await tenants.holder()
    problem_of(await holder.get(f"/v1/webhook-endpoints/{theirs}"), 404, "not-found")
    problem_of(await holder.post(f"/v1/webhook-endpoints/{theirs}/test"), 404, "not-found")
    assert (await holder.get("/v1/webhook-endpoints")).json()["data"] == []
    assert (await holder.get("/v1/deliveries")).json()["data"] == []
    assert (await holder.get("/v1/events")).json()["data"] == []
    their_delivery = (await tenants.other.get("/v1/deliveries")).json()["data"][0]["id"]
    problem_of(await holder.get(f"/v1/deliveries/{their_delivery}"), 404, "not-found")
    problem_of(await holder.post(f"/v1/deliveries/{their_delivery}/retry"), 404, "not-found")


async def test_an_expired_link_is_refused_saying_so(
    tenants: Tenants, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await tenants.link(ttl=60)
    holder = tenants.as_client(session["token"])
    assert (await holder.get("/v1/webhook-endpoints")).is_success
    monkeypatch.setattr(clock, "now", _later(timedelta(seconds=59)))
    assert (await holder.get("/v1/webhook-endpoints")).is_success
    monkeypatch.setattr(clock, "now", _later(timedelta(seconds=61)))
    refused = await holder.get("/v1/webhook-endpoints")
    problem = problem_of(refused, 401, "unauthorized")
    assert f"expired at {session['expires_at']}" in problem["detail"]
    assert refused.headers["www-authenticate"] == 'Bearer realm="ustun"'


async def test_a_revoked_link_is_refused_at_once_saying_so(tenants: Tenants) -> None:
    session = await tenants.link()
    holder = tenants.as_client(session["token"])
    assert (await holder.get("/v1/webhook-endpoints")).is_success
    gone = await tenants.operator.delete(f"/v1/portal-sessions/{session['id']}")
    assert gone.status_code == 204
    problem = problem_of(await holder.get("/v1/webhook-endpoints"), 401, "unauthorized")
    assert "revoked" in problem["detail"]
    shown = (await tenants.operator.get(f"/v1/portal-sessions/{session['id']}")).json()
    assert shown["revoked_at"] is not None
    again = await tenants.operator.delete(f"/v1/portal-sessions/{session['id']}")
    assert again.status_code == 204
    assert (await tenants.operator.get(f"/v1/portal-sessions/{session['id']}")).json() == shown
    missing = await tenants.operator.delete("/v1/portal-sessions/ps_nope")
    problem_of(missing, 404, "not-found")


@pytest.mark.parametrize(
    "token",
    ["ptl_" + "A" * 43, "ptl_", "ptl_x y", "ustun_sk_forged"],
)
async def test_a_forged_token_is_refused(tenants: Tenants, token: str) -> None:
    refused = await tenants.as_client(token).get("/v1/webhook-endpoints")
    problem = problem_of(refused, 401, "unauthorized")
    assert "Unknown portal link" in problem["detail"] or "API key" in problem["detail"]


async def test_a_forged_portal_token_says_the_link_is_unknown(tenants: Tenants) -> None:
    real = (await tenants.link())["token"]
    forged = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")
    problem = problem_of(
        await tenants.as_client(forged).get("/v1/webhook-endpoints"), 401, "unauthorized"
    )
    assert problem["detail"].startswith("Unknown portal link")


async def test_a_link_with_event_types_subscribes_to_them_only(tenants: Tenants) -> None:
    holder = await tenants.holder(event_types=["payment.succeeded", "payment.failed"])
    types = (await holder.get("/v1/event-types")).json()["data"]
    assert [t["name"] for t in types] == ["payment.succeeded", "payment.failed"]
    everything = (await tenants.own.get("/v1/event-types")).json()["data"]
    assert len(everything) > 2

    wide = await holder.post("/v1/webhook-endpoints", json={"url": HOOK, "events": ["payment.*"]})
    problem = problem_of(wide, 422, "validation-error")
    assert problem["errors"][0]["field"] == "body.events.0"
    assert "'payment.*'" in problem["detail"]
    defaulted = await holder.post("/v1/webhook-endpoints", json={"url": HOOK})
    assert "'*'" in problem_of(defaulted, 422, "validation-error")["detail"]

    made = await holder.post(
        "/v1/webhook-endpoints", json={"url": HOOK, "events": ["payment.failed"]}
    )
    assert made.status_code == 201, made.text
    path = f"/v1/webhook-endpoints/{made.json()['id']}"
    widen = await holder.patch(
        path, json={"events": ["payment.failed", "transfer.completed"]}, headers={"if-match": "*"}
    )
    problem = problem_of(widen, 422, "validation-error")
    assert problem["errors"][0]["field"] == "body.events.1"
    narrow = await holder.patch(
        path, json={"events": ["payment.succeeded"]}, headers={"if-match": "*"}
    )
    assert narrow.json()["events"] == ["payment.succeeded"]
    # The account's own API key is not held to the link's types.
    assert (await tenants.own.patch(path, json={"events": ["*"]})).is_success


async def test_the_library_opens_a_link_the_service_accepts(tenants: Tenants, db: Database) -> None:
    catalog = Catalog()
    catalog.register("payment.failed", schema={"type": "object"})
    name = f"lib-{uuid.uuid4().hex[:10]}"  # made on first use, as `emit` does
    made = await portal.link(
        db,
        name,
        base_url="https://api.example.com/",
        ttl=timedelta(minutes=5),
        event_types=["payment.failed"],
        catalog=catalog,
    )
    assert made.url == f"https://api.example.com/portal/#token={made.token}"
    assert made.session.account == name
    assert made.session.created_by is None
    assert made.session.expires_at - made.session.created_at == timedelta(minutes=5)
    holder = tenants.as_client(made.token)
    assert (await holder.get("/v1/webhook-endpoints")).json()["data"] == []
    assert [t["name"] for t in (await holder.get("/v1/event-types")).json()["data"]] == [
        "payment.failed"
    ]
    assert (await portal.revoke(db, made.session.id)) is not None
    problem_of(await holder.get("/v1/webhook-endpoints"), 401, "unauthorized")


async def test_the_library_refuses_what_the_route_refuses(db: Database) -> None:
    with pytest.raises(ProblemError, match="60 to 604800 seconds"):
        await portal.link(db, "x", base_url="https://a.example", ttl=30)
    with pytest.raises(ProblemError, match=r"'nope\.nope' is not an event type"):
        await portal.link(
            db, "x", base_url="https://a.example", event_types=["nope.nope"], catalog=Catalog()
        )
