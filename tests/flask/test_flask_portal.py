"""`ustun.flask.portal.link` on a Flask app's own session, on both databases: the link works
once that session commits, and is refused as the service refuses bad values."""

from __future__ import annotations

import httpx
import pytest
from flask import Flask
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from support import problem_of
from ustun.errors import ProblemError
from ustun.flask import Ustun, portal


def _app(database_url: str) -> tuple[Flask, Ustun]:
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    app = Flask("portal-links")
    app.config["USTUN_PUBLIC_URL"] = "https://hooks.example.com"
    return app, Ustun(app, engine=create_engine(url))


async def test_a_link_in_the_apps_transaction_works_once_committed(
    database_url: str, client: httpx.AsyncClient
) -> None:
    app, ustun = _app(database_url)
    with app.app_context():
        with ustun.atomic():
            made = portal.link("flask-tenant", ttl=120)
        with pytest.raises(ProblemError, match="60 to 604800 seconds"):
            portal.link("flask-tenant", ttl=10)
    assert made.url == f"https://hooks.example.com/portal/#token={made.token}"
    assert made.session.account == "flask-tenant"
    holder = {"authorization": f"Bearer {made.token}"}
    assert (await client.get("/v1/webhook-endpoints", headers=holder)).json()["data"] == []
    problem_of(await client.get("/v1/jobs", headers=holder), 403, "forbidden")


async def test_a_link_rolled_back_with_the_app_never_works(
    database_url: str, client: httpx.AsyncClient
) -> None:
    app, ustun = _app(database_url)
    with app.app_context(), pytest.raises(RuntimeError), ustun.atomic():
        made = portal.link("flask-tenant")
        raise RuntimeError("the view failed")
    refused = await client.get(
        "/v1/webhook-endpoints", headers={"authorization": f"Bearer {made.token}"}
    )
    assert problem_of(refused, 401, "unauthorized")["detail"].startswith("Unknown portal link")
