"""`/v1/documents`: ETags on every response, 304s, 428s, 412s, merge patch, per-account scope."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from ustun.service.plumbing.accounts import create_key
from ustun.store import Database

ETAG = re.compile(r'"[1-9][0-9]*\.[0-9a-f]{16}"')
MERGE = {"content-type": "application/merge-patch+json"}


async def _create(
    client: httpx.AsyncClient, title: str = "Plan", body: str = "v1"
) -> httpx.Response:
    made = await client.post("/v1/documents", json={"title": title, "body": body})
    assert made.status_code == 201, made.text
    return made


def _problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    assert str(body["type"]).endswith(f"/problems/{slug}")
    return body


async def test_post_returns_201_location_and_a_strong_etag(client: httpx.AsyncClient) -> None:
    made = await _create(client)
    doc = made.json()
    assert doc["id"].startswith("doc_")
    assert made.headers["location"] == f"/v1/documents/{doc['id']}"
    assert ETAG.fullmatch(made.headers["etag"])
    assert doc["version"] == 1
    assert doc["title"] == "Plan"
    assert doc["body"] == "v1"
    assert doc["created_at"] == doc["updated_at"]
    assert "last-modified" in made.headers

    got = await client.get(made.headers["location"])
    assert got.status_code == 200
    assert got.json() == doc
    assert got.headers["etag"] == made.headers["etag"]
    head = await client.head(made.headers["location"])
    assert head.status_code == 200
    assert head.headers["etag"] == made.headers["etag"]


async def test_if_none_match_gives_304_with_weak_comparison(client: httpx.AsyncClient) -> None:
    made = await _create(client)
    url, tag = made.headers["location"], made.headers["etag"]
    for value in (tag, f"W/{tag}", f'"nope", {tag}', "*"):
        for method in ("GET", "HEAD"):
            cached = await client.request(method, url, headers={"if-none-match": value})
            assert cached.status_code == 304, value
            assert cached.content == b""
            assert cached.headers["etag"] == tag
    fresh = await client.get(url, headers={"if-none-match": '"1.0000000000000000"'})
    assert fresh.status_code == 200
    since = await client.get(url, headers={"if-modified-since": made.headers["last-modified"]})
    assert since.status_code == 304


async def test_put_replaces_under_if_match_and_changes_the_etag(
    client: httpx.AsyncClient,
) -> None:
    made = await _create(client)
    url, tag = made.headers["location"], made.headers["etag"]
    put = await client.put(url, json={"title": "New", "body": "v2"}, headers={"if-match": tag})
    assert put.status_code == 200, put.text
    assert put.json()["version"] == 2
    assert put.json()["title"] == "New"
    assert put.headers["etag"] != tag
    assert ETAG.fullmatch(put.headers["etag"])

    stale = await client.put(url, json={"title": "Lost"}, headers={"if-match": tag})
    problem = _problem(stale, 412, "precondition-failed")
    assert "re-apply" in str(problem["detail"])
    assert problem["header"] == "If-Match"
    assert (await client.get(url)).json()["title"] == "New"

    listed = await client.put(
        url, json={"title": "Listed"}, headers={"if-match": f'"x", {put.headers["etag"]}'}
    )
    assert listed.status_code == 200
    star = await client.put(url, json={"title": "Any"}, headers={"if-match": "*"})
    assert star.status_code == 200
    assert star.json()["version"] == 4


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
async def test_writes_without_if_match_are_428(client: httpx.AsyncClient, method: str) -> None:
    made = await _create(client)
    headers = MERGE if method == "PATCH" else {}
    response = await client.request(
        method, made.headers["location"], json={"title": "x"}, headers=headers
    )
    problem = _problem(response, 428, "precondition-required")
    assert problem["header"] == "If-Match"
    assert "If-Match" in str(problem["detail"])
    assert (await client.get(made.headers["location"])).json()["version"] == 1


async def test_weak_or_unmatched_if_match_is_412(client: httpx.AsyncClient) -> None:
    made = await _create(client)
    url, tag = made.headers["location"], made.headers["etag"]
    for value in (f"W/{tag}", '"1"', "", '"999999999999.0000000000000000"'):
        response = await client.put(url, json={"title": "x"}, headers={"if-match": value})
        _problem(response, 412, "precondition-failed")


async def test_put_if_none_match_star_creates_at_a_chosen_id(client: httpx.AsyncClient) -> None:
    url = f"/v1/documents/my-Doc_{uuid.uuid4().hex[:8]}"
    created = await client.put(url, json={"title": "Mine"}, headers={"if-none-match": "*"})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == url
    assert created.json()["id"] == url.rsplit("/", 1)[1]
    assert created.json()["body"] == ""
    assert ETAG.fullmatch(created.headers["etag"])

    again = await client.put(url, json={"title": "Twice"}, headers={"if-none-match": "*"})
    problem = _problem(again, 412, "precondition-failed")
    assert problem["header"] == "If-None-Match"
    assert (await client.get(url)).json()["title"] == "Mine"

    both = await client.put(
        url,
        json={"title": "Both"},
        headers={"if-match": created.headers["etag"], "if-none-match": "*"},
    )
    _problem(both, 412, "precondition-failed")


@pytest.mark.parametrize("doc_id", ["a" * 65, "has.dot", "sp%20ace"])
async def test_put_rejects_an_invalid_chosen_id(client: httpx.AsyncClient, doc_id: str) -> None:
    response = await client.put(
        f"/v1/documents/{doc_id}", json={"title": "x"}, headers={"if-none-match": "*"}
    )
    _problem(response, 422, "validation-error")


async def test_if_match_on_a_missing_document_is_412(client: httpx.AsyncClient) -> None:
    for value in ("*", '"1.0000000000000000"'):
        response = await client.put(
            "/v1/documents/never-made", json={"title": "x"}, headers={"if-match": value}
        )
        _problem(response, 412, "precondition-failed")
    assert (await client.get("/v1/documents/never-made")).status_code == 404


async def test_delete_then_recreate_never_matches_an_old_tag(client: httpx.AsyncClient) -> None:
    url = f"/v1/documents/{uuid.uuid4().hex}"
    first = await client.put(url, json={"title": "one"}, headers={"if-none-match": "*"})
    old_tag = first.headers["etag"]
    deleted = await client.delete(url, headers={"if-match": old_tag})
    assert deleted.status_code == 204
    assert (await client.get(url)).status_code == 404
    _problem(await client.delete(url, headers={"if-match": old_tag}), 404, "not-found")

    second = await client.put(url, json={"title": "two"}, headers={"if-none-match": "*"})
    assert second.status_code == 201
    assert second.json()["version"] == 1
    assert second.headers["etag"] != old_tag
    stale = await client.put(url, json={"title": "lost"}, headers={"if-match": old_tag})
    _problem(stale, 412, "precondition-failed")
    assert (await client.get(url, headers={"if-none-match": old_tag})).status_code == 200


async def test_delete_with_a_stale_tag_is_412(client: httpx.AsyncClient) -> None:
    made = await _create(client)
    url, tag = made.headers["location"], made.headers["etag"]
    await client.put(url, json={"title": "changed"}, headers={"if-match": tag})
    _problem(await client.delete(url, headers={"if-match": tag}), 412, "precondition-failed")
    assert (await client.get(url)).status_code == 200


async def test_merge_patch(client: httpx.AsyncClient) -> None:
    made = await _create(client, title="T", body="B")
    url, tag = made.headers["location"], made.headers["etag"]
    patched = await client.patch(url, json={"body": "B2"}, headers={**MERGE, "if-match": tag})
    assert patched.status_code == 200, patched.text
    assert patched.json()["title"] == "T"
    assert patched.json()["body"] == "B2"
    assert patched.json()["version"] == 2
    assert patched.headers["etag"] != tag
    stale = await client.patch(url, json={"title": "x"}, headers={**MERGE, "if-match": tag})
    _problem(stale, 412, "precondition-failed")


@pytest.mark.parametrize(
    "content_type", ["application/json", "text/plain", "application/json-patch+json"]
)
async def test_patch_other_media_types_are_415(
    client: httpx.AsyncClient, content_type: str
) -> None:
    made = await _create(client)
    response = await client.patch(
        made.headers["location"],
        content=b'{"title": "x"}',
        headers={"content-type": content_type, "if-match": made.headers["etag"]},
    )
    _problem(response, 415, "unsupported-media-type")
    assert response.headers["accept-patch"] == "application/merge-patch+json"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (b'{"title": null}', "body.title"),
        (b'{"title": 5}', "body.title"),
        (b'{"colour": "red"}', "body.colour"),
        (b'{"version": 9}', "body.version"),
        (b"[1, 2]", "body"),
        (b'"title"', "body"),
    ],
)
async def test_patch_rejects_bad_bodies_with_422(
    client: httpx.AsyncClient, patch: bytes, field: str
) -> None:
    made = await _create(client)
    response = await client.patch(
        made.headers["location"],
        content=patch,
        headers={**MERGE, "if-match": made.headers["etag"]},
    )
    problem = _problem(response, 422, "validation-error")
    assert field in [e["field"] for e in problem["errors"]]  # type: ignore[attr-defined]
    assert (await client.get(made.headers["location"])).json()["version"] == 1


@pytest.mark.parametrize(
    "body",
    [{"title": 1}, {"title": "x", "body": ["y"]}, {"title": "x", "id": "mine"}, {}, {"body": "y"}],
)
async def test_post_and_put_reject_unknown_fields_and_wrong_types(
    client: httpx.AsyncClient, body: dict[str, object]
) -> None:
    _problem(await client.post("/v1/documents", json=body), 422, "validation-error")
    made = await _create(client)
    put = await client.put(made.headers["location"], json=body, headers={"if-match": "*"})
    _problem(put, 422, "validation-error")


async def test_another_accounts_document_is_404(client: httpx.AsyncClient, db: Database) -> None:
    made = await _create(client)
    url, tag = made.headers["location"], made.headers["etag"]
    other = await create_key(db, f"other-{uuid.uuid4().hex[:12]}")
    auth = {"authorization": f"Bearer {other}"}
    assert (await client.get(url, headers=auth)).status_code == 404
    _problem(
        await client.put(url, json={"title": "x"}, headers={**auth, "if-match": tag}),
        412,
        "precondition-failed",
    )
    _problem(await client.delete(url, headers={**auth, "if-match": tag}), 404, "not-found")
    patch = await client.patch(url, json={"title": "x"}, headers={**auth, **MERGE, "if-match": tag})
    _problem(patch, 404, "not-found")
    # The same client-chosen id is free in every account.
    mine = await client.put(
        "/v1/documents/shared-name", json={"title": "a"}, headers={"if-none-match": "*"}
    )
    theirs = await client.put(
        "/v1/documents/shared-name", json={"title": "b"}, headers={**auth, "if-none-match": "*"}
    )
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert (await client.get(url)).json()["version"] == 1
