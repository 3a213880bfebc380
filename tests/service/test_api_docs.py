"""`/docs`: Swagger UI from the package's own assets, with no inline script."""

from __future__ import annotations

from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from ustun.service import create_app
from ustun.service.specs.api_docs import STATIC
from ustun.settings import Settings


class Assets(HTMLParser):
    """The URLs a page loads (`src`, `href`) and the text of its inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        self._in_script = tag == "script" and "src" not in found

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'ustun.db'}"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        yield client


async def page_assets(http: httpx.AsyncClient) -> Assets:
    response = await http.get("/docs")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"].startswith("script-src 'self';")
    assets = Assets()
    assets.feed(response.text)
    return assets


async def test_docs_loads_only_same_origin_assets_and_no_inline_script(
    http: httpx.AsyncClient,
) -> None:
    assets = await page_assets(http)
    assert assets.urls, "the page loads nothing"
    for url in assets.urls:
        parts = urlsplit(url)
        assert not parts.scheme, url
        assert not parts.netloc, url
        assert url.startswith("/"), url
    assert assets.inline_scripts == []
    assert {"/docs/static/swagger-ui-bundle.js", "/docs/static/swagger-init.js"} <= set(assets.urls)


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("swagger-ui-bundle.js", "text/javascript"),
        ("swagger-init.js", "text/javascript"),
        ("swagger-ui.css", "text/css"),
        ("favicon-32x32.png", "image/png"),
    ],
)
async def test_every_asset_is_served_from_the_package_with_its_media_type(
    http: httpx.AsyncClient, name: str, media_type: str
) -> None:
    response = await http.get(f"/docs/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == media_type
    assert response.content == (STATIC / name).read_bytes()


async def test_every_url_the_page_loads_is_served(http: httpx.AsyncClient) -> None:
    for url in (await page_assets(http)).urls:
        assert (await http.get(url)).status_code == 200, url


async def test_the_cdn_pages_of_fastapi_are_gone(http: httpx.AsyncClient) -> None:
    assert (await http.get("/redoc")).status_code == 404
    assert "cdn.jsdelivr.net" not in (await http.get("/docs")).text
