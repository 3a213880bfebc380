import html

import httpx
import pytest

from ustun.http.problem import CATALOGUE
from ustun.service import create_app
from ustun.settings import Settings
from ustun.store import Database


async def test_unknown_path_is_a_404_problem(client: httpx.AsyncClient) -> None:
    response = await client.get("/nope")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"].endswith("/problems/not-found")
    assert response.json()["detail"] == "Nothing at /nope."


async def test_wrong_method_is_a_405_problem_with_allow(client: httpx.AsyncClient) -> None:
    response = await client.delete("/v1/payments")
    assert response.status_code == 405
    assert response.json()["type"].endswith("/problems/method-not-allowed")
    assert "GET" in response.headers["allow"]


@pytest.mark.parametrize("slug", sorted(CATALOGUE))
async def test_every_problem_type_has_a_page(client: httpx.AsyncClient, slug: str) -> None:
    response = await client.get(f"/problems/{slug}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert CATALOGUE[slug].title.replace("'", "&#x27;") in response.text


async def test_each_problem_page_links_to_its_section_of_the_served_reference(
    client: httpx.AsyncClient,
) -> None:
    index = await client.get("/problems")
    assert index.status_code == 200
    for slug, entry in CATALOGUE.items():
        page = (await client.get(f"/problems/{slug}")).text
        assert f'href="/problems#{slug}"' in page
        assert f"docs/problems.md#{slug}" in page
        assert f'<section id="{slug}" ' in index.text
        assert html.escape(entry.description) in page


async def test_unknown_problem_type_page_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/problems/<script>")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "query.limit"),
        ("limit=101", "query.limit"),
        ("limit=abc", "query.limit"),
        ("cursor=../../etc", "query.cursor"),
    ],
)
async def test_bad_query_is_a_422_validation_problem(
    client: httpx.AsyncClient, query: str, field: str
) -> None:
    response = await client.get(f"/v1/payments?{query}")
    assert response.status_code == 422
    body = response.json()
    assert body["type"].endswith("/problems/validation-error")
    assert [e["field"] for e in body["errors"]] == [field]


async def test_unhandled_error_is_a_500_problem_without_internals(
    settings: Settings, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(settings, db=db)

    @app.get("/explode")
    async def explode() -> None:
        raise RuntimeError("secret internal detail")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        response = await http.get("/explode")
    assert response.status_code == 500
    body = response.json()
    assert body["type"].endswith("/problems/internal-error")
    assert "secret internal detail" not in response.text
    assert "Traceback" not in response.text
    request_id = response.headers["x-request-id"]
    assert request_id in body["detail"]
    assert any(request_id in r.getMessage() and r.exc_info for r in caplog.records)
