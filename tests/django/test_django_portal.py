"""`ustun.django.portal.link` in the example shop, on both databases: a link opened on Django's
connection is one `ustun serve` on the same database accepts, for that account only."""

from __future__ import annotations

import json

import httpx

from django_support import Shop
from ustun.service.app import create_app
from ustun.settings import Settings
from ustun.store import Database


async def test_a_link_opened_in_django_is_accepted_by_the_service(shop: Shop) -> None:
    code = (
        "import json; from ustun.django import portal; "
        "made = portal.link('django-tenant', base_url='https://hooks.example.com', ttl=300); "
        "print(json.dumps({'url': made.url, 'token': made.token, "
        "'account': made.session.account, 'ttl': "
        "(made.session.expires_at - made.session.created_at).total_seconds()}))"
    )
    made = json.loads(shop.manage("shell", "-c", code).stdout.strip().splitlines()[-1])
    assert made["url"] == f"https://hooks.example.com/portal/#token={made['token']}"
    assert made["account"] == "django-tenant"
    assert made["ttl"] == 300

    refused = shop.manage(
        "shell", "-c", "from ustun.django import portal; portal.link('x', ttl=5)", check=False
    )
    assert refused.returncode != 0
    assert "60 to 604800 seconds" in refused.stderr

    db = Database(shop.database_url)
    app = create_app(Settings(database_url=shop.database_url), db=db)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://testserver",
                headers={"authorization": f"Bearer {made['token']}"},
            ) as holder,
        ):
            assert (await holder.get("/v1/webhook-endpoints")).json()["data"] == []
            assert (await holder.get("/v1/payments")).status_code == 403
    finally:
        await db.dispose()
