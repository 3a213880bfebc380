"""Dashboard pages of the webhooks pillar, over HTTP: endpoints, events, deliveries."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from dashboard_support import ENDPOINT, SECRET, create_endpoint, log_in
from ustun.service.plumbing.accounts import create_key

EVENT = re.compile(r"/dashboard/events/(evt_[A-Za-z0-9]+)")
DELIVERY = re.compile(r"/dashboard/deliveries/(dlv_[A-Za-z0-9]+)")
ETAG = re.compile(r'name="etag" value="([^"]+)"')
ALERT = re.compile(r'<p class="error" role="alert">(.*?)</p>', re.DOTALL)
PUBLIC_KEY = re.compile(r"whpk_[A-Za-z0-9+/=]+")
SHOWN_KEY = re.compile(r"<p class=\"secret\" id=\"secret\" data-secret>([^<]*)</p>")
# A broker URL's credentials: kept encrypted, never on a page.
BROKER_USER, BROKER_PASSWORD = "dash-user", "Pw-7c1f0e9a"
AMQP_URL = f"amqps://{BROKER_USER}:{BROKER_PASSWORD}@broker.example.com/orders-vhost"


async def _etag(browser: httpx.AsyncClient, endpoint_id: str) -> str:
    """The ETag the endpoint's page put into its enable/disable form."""
    page = await browser.get(f"/dashboard/endpoints/{endpoint_id}")
    found = ETAG.search(page.text)
    assert found, page.text
    return html.unescape(found.group(1))


async def test_create_an_endpoint_and_see_its_secret_once(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    endpoint_id, secret = await create_endpoint(browser, csrf, "https://example.com/hook")
    listing = await browser.get("/dashboard/endpoints")
    assert endpoint_id in listing.text
    assert "https://example.com/hook" in listing.text
    detail = await browser.get(f"/dashboard/endpoints/{endpoint_id}")
    assert detail.status_code == 200
    assert secret not in detail.text
    assert "whsec_" not in detail.text


async def test_the_deliveries_filter_offers_the_accounts_endpoints(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    first, _ = await create_endpoint(browser, csrf, "https://example.com/first")
    second, _ = await create_endpoint(browser, csrf, "https://example.com/second")
    page = (await browser.get("/dashboard/deliveries")).text
    assert '<select name="endpoint_id">' in page
    assert f'<option value="{first}">https://example.com/first ({first})</option>' in page
    assert f'<option value="{second}">https://example.com/second ({second})</option>' in page
    chosen = (await browser.get("/dashboard/deliveries", params={"endpoint_id": second})).text
    assert f'<option value="{second}" selected>' in chosen
    assert f'<option value="{first}">' in chosen


async def test_a_bad_url_is_explained_on_the_page(browser: httpx.AsyncClient, api_key: str) -> None:
    csrf = await log_in(browser, api_key)
    refused = await browser.post(
        "/dashboard/endpoints", data={"csrf_token": csrf, "url": "ftp://example.com/x"}
    )
    assert refused.status_code == 200
    assert 'role="alert"' in refused.text
    assert "whsec_" not in refused.text


async def test_disable_enable_rotate_and_test(browser: httpx.AsyncClient, api_key: str) -> None:
    csrf = await log_in(browser, api_key)
    endpoint_id, secret = await create_endpoint(browser, csrf, "https://example.com/a")
    base = f"/dashboard/endpoints/{endpoint_id}"

    etag = await _etag(browser, endpoint_id)
    disabled = await browser.post(
        f"{base}/enabled", data={"csrf_token": csrf, "enabled": "false", "etag": etag}
    )
    assert disabled.status_code == 303
    page = await browser.get(disabled.headers["location"])
    assert "Endpoint disabled." in page.text
    assert ">Enable<" in page.text
    refused = await browser.post(f"{base}/test", data={"csrf_token": csrf})
    assert 'role="alert"' in refused.text

    etag = await _etag(browser, endpoint_id)
    await browser.post(
        f"{base}/enabled", data={"csrf_token": csrf, "enabled": "true", "etag": etag}
    )
    rotated = await browser.post(f"{base}/rotate", data={"csrf_token": csrf})
    new_secret = SECRET.search(rotated.text)
    assert new_secret
    assert new_secret.group() != secret

    tested = await browser.post(f"{base}/test", data={"csrf_token": csrf})
    assert tested.status_code == 303
    events = await browser.get("/dashboard/events", params={"type": "ping"})
    event_id = EVENT.search(events.text)
    assert event_id, events.text
    event = await browser.get(f"/dashboard/events/{event_id.group(1)}")
    payload = html.unescape(event.text)
    assert f'"endpoint_id": "{endpoint_id}"' in payload
    assert '"type": "ping"' in payload
    delivery_id = DELIVERY.search(event.text)
    assert delivery_id

    filtered = await browser.get(
        "/dashboard/deliveries", params={"endpoint_id": endpoint_id, "status": "pending"}
    )
    assert delivery_id.group(1) in filtered.text
    none = await browser.get("/dashboard/deliveries", params={"status": "dead"})
    assert delivery_id.group(1) not in none.text

    detail = await browser.get(f"/dashboard/deliveries/{delivery_id.group(1)}")
    assert "Retry" in detail.text
    retried = await browser.post(
        f"/dashboard/deliveries/{delivery_id.group(1)}/retry", data={"csrf_token": csrf}
    )
    assert retried.status_code == 303
    assert "queued for another attempt" in (await browser.get(retried.headers["location"])).text

    recovered = await browser.post(
        f"{base}/recover", data={"csrf_token": csrf, "since": "2020-01-01T00:00:00"}
    )
    assert "deliveries queued again" in recovered.text


async def test_a_stale_enable_form_changes_nothing(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    endpoint_id, _ = await create_endpoint(browser, csrf, "https://example.com/s")
    base = f"/dashboard/endpoints/{endpoint_id}"
    shown = await _etag(browser, endpoint_id)
    off = {"csrf_token": csrf, "enabled": "false", "etag": shown}
    assert (await browser.post(f"{base}/enabled", data=off)).status_code == 303
    on = {"csrf_token": csrf, "enabled": "true", "etag": shown}
    stale = await browser.post(f"{base}/enabled", data=on)
    assert stale.status_code == 200
    assert "changed since this page was loaded" in stale.text
    assert ">Enable<" in stale.text
    assert await _etag(browser, endpoint_id) != shown


async def test_actions_need_the_csrf_token(browser: httpx.AsyncClient, api_key: str) -> None:
    csrf = await log_in(browser, api_key)
    endpoint_id, _ = await create_endpoint(browser, csrf, "https://example.com/c")
    for path, data in [
        ("/dashboard/endpoints", {"url": "https://example.com/d"}),
        (f"/dashboard/endpoints/{endpoint_id}/enabled", {"enabled": "false", "etag": '"1"'}),
        (f"/dashboard/endpoints/{endpoint_id}/rotate", {}),
        (f"/dashboard/endpoints/{endpoint_id}/test", {}),
        (f"/dashboard/endpoints/{endpoint_id}/recover", {"since": "2020-01-01T00:00:00"}),
    ]:
        refused = await browser.post(path, data=data)
        assert refused.status_code == 403, path
    assert "enabled" in (await browser.get(f"/dashboard/endpoints/{endpoint_id}")).text


async def test_another_account_sees_nothing_of_the_first(app: FastAPI, api_key: str) -> None:
    other_key = await create_key(app.state.db, f"other-{uuid.uuid4().hex[:8]}")
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as first,
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as second,
    ):
        csrf = await log_in(first, api_key)
        endpoint_id, _ = await create_endpoint(first, csrf, "https://example.com/mine")
        await first.post(f"/dashboard/endpoints/{endpoint_id}/test", data={"csrf_token": csrf})
        events = await first.get("/dashboard/events")
        event_id = EVENT.search(events.text)
        assert event_id

        other_csrf = await log_in(second, other_key)
        for path in (
            "/dashboard",
            "/dashboard/endpoints",
            "/dashboard/events",
            "/dashboard/deliveries",
        ):
            page = await second.get(path)
            assert page.status_code == 200
            assert endpoint_id not in page.text
            assert event_id.group(1) not in page.text
        assert (await second.get(f"/dashboard/endpoints/{endpoint_id}")).status_code == 404
        assert (await second.get(f"/dashboard/events/{event_id.group(1)}")).status_code == 404
        stolen = await second.post(
            f"/dashboard/endpoints/{endpoint_id}/rotate", data={"csrf_token": other_csrf}
        )
        assert stolen.status_code == 404


async def test_the_endpoint_page_shows_the_signature_scheme(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str
) -> None:
    auth = {"authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver", headers=auth
    ) as api:
        made = (
            await api.post(
                "/v1/webhook-endpoints",
                json={"url": "https://example.com/ed", "signature": "ed25519"},
            )
        ).json()
    csrf = await log_in(browser, api_key)
    hmac_id, _ = await create_endpoint(browser, csrf, "https://example.com/hmac")
    hmac_page = (await browser.get(f"/dashboard/endpoints/{hmac_id}")).text
    assert "hmac-sha256" in hmac_page
    assert ">Rotate secret<" in hmac_page
    page = (await browser.get(f"/dashboard/endpoints/{made['id']}")).text
    assert "ed25519" in page
    assert made["public_key"] in html.unescape(page)
    rotated = await browser.post(
        f"/dashboard/endpoints/{made['id']}/rotate", data={"csrf_token": csrf}
    )
    assert rotated.status_code == 200
    assert "whsec_" not in rotated.text
    assert "whsk_" not in rotated.text
    assert made["public_key"] not in html.unescape(rotated.text)
    assert "whpk_" in rotated.text


async def _post_endpoint(browser: httpx.AsyncClient, csrf: str, **fields: str) -> httpx.Response:
    """Post the dashboard's "add an endpoint" form with `fields`."""
    answer = await browser.post("/dashboard/endpoints", data={"csrf_token": csrf, **fields})
    assert answer.status_code == 200, answer.text
    return answer


def _alert(page: str) -> str:
    """The text of the page's error message."""
    found = ALERT.search(page)
    assert found, page
    return html.unescape(found.group(1))


@pytest.mark.parametrize(
    ("kind", "url", "name", "label", "shown_url"),
    [
        ("rabbitmq", AMQP_URL, "orders", "Exchange", "amqps://broker.example.com/orders-vhost"),
        (
            "nats",
            "tls://broker.example.com:4222",
            "ustun.events",
            "Subject",
            "tls://broker.example.com:4222",
        ),
    ],
)
async def test_the_form_creates_a_broker_endpoint(
    app: FastAPI,
    browser: httpx.AsyncClient,
    api_key: str,
    kind: str,
    url: str,
    name: str,
    label: str,
    shown_url: str,
) -> None:
    csrf = await log_in(browser, api_key)
    created = await _post_endpoint(
        browser, csrf, kind=kind, url=url, destination=name, events="payment.*"
    )
    assert 'role="alert"' not in created.text
    assert created.headers["cache-control"] == "no-store"
    shown = SHOWN_KEY.search(created.text)
    assert shown, created.text
    assert SECRET.fullmatch(shown.group(1))
    endpoint_id = ENDPOINT.search(created.text)
    assert endpoint_id, created.text
    assert f"{kind}: {shown_url}" in created.text

    page = (await browser.get(f"/dashboard/endpoints/{endpoint_id.group(1)}")).text
    assert f"<dt>Kind</dt><dd>{kind}</dd>" in page
    assert f"<dt>{label}</dt><dd><code>{name}</code></dd>" in page
    assert f"<dt>URL</dt><dd>{shown_url}</dd>" in page
    assert shown.group(1) not in page
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    ) as api:
        stored = (await api.get(f"/v1/webhook-endpoints/{endpoint_id.group(1)}")).json()
    assert {k: stored[k] for k in ("kind", "url", "exchange", "subject", "events")} == {
        "kind": kind,
        "url": shown_url,
        "exchange": name if kind == "rabbitmq" else None,
        "subject": name if kind == "nats" else None,
        "events": ["payment.*"],
    }


@pytest.mark.parametrize(
    ("form", "body"),
    [
        (
            {"kind": "rabbitmq", "url": AMQP_URL},
            {"kind": "rabbitmq", "url": AMQP_URL},
        ),
        (
            {"kind": "nats", "url": "nats://broker.example.com", "destination": "events.>"},
            {"kind": "nats", "url": "nats://broker.example.com", "subject": "events.>"},
        ),
        (
            {"kind": "rabbitmq", "url": "nats://broker.example.com", "destination": "orders"},
            {"kind": "rabbitmq", "url": "nats://broker.example.com", "exchange": "orders"},
        ),
        (
            {"kind": "nats", "url": "nats://10.1.2.3:4222", "destination": "ustun.events"},
            {"kind": "nats", "url": "nats://10.1.2.3:4222", "subject": "ustun.events"},
        ),
        (
            {"kind": "kafka", "url": "https://example.com/k"},
            {"kind": "kafka", "url": "https://example.com/k"},
        ),
        (
            {"url": "https://example.com/s", "signature": "rsa"},
            {"url": "https://example.com/s", "signature": "rsa"},
        ),
    ],
)
async def test_a_refused_broker_endpoint_shows_the_apis_message(
    app: FastAPI,
    browser: httpx.AsyncClient,
    api_key: str,
    form: dict[str, str],
    body: dict[str, Any],
) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    ) as api:
        problem = (await api.post("/v1/webhook-endpoints", json=body)).json()
    assert problem["type"].endswith("/validation-error"), problem
    csrf = await log_in(browser, api_key)
    refused = await _post_endpoint(browser, csrf, **form)
    message = problem["errors"][0]["message"]
    assert message in _alert(refused.text)
    # What our validators say, without pydantic's "Value error, " or a made-up field name.
    assert "Value error" not in message
    assert "value:" not in _alert(refused.text)
    assert "data-created" not in refused.text
    assert "No endpoints yet." in refused.text
    assert BROKER_PASSWORD not in refused.text


async def test_an_http_endpoint_takes_no_exchange_or_subject(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    refused = await _post_endpoint(
        browser, csrf, kind="http", url="https://example.com/h", destination="orders"
    )
    assert "leave that field empty" in _alert(refused.text)
    assert "No endpoints yet." in refused.text


async def test_an_ed25519_endpoint_shows_its_public_key_not_a_secret(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    created = await _post_endpoint(
        browser,
        csrf,
        kind="nats",
        url="tls://broker.example.com",
        destination="ustun.signed",
        signature="ed25519",
    )
    shown = SHOWN_KEY.search(created.text)
    assert shown, created.text
    assert PUBLIC_KEY.fullmatch(shown.group(1))
    assert "whsec_" not in created.text
    assert "whsk_" not in created.text
    endpoint_id = ENDPOINT.search(created.text)
    assert endpoint_id
    page = (await browser.get(f"/dashboard/endpoints/{endpoint_id.group(1)}")).text
    assert "<dd>ed25519 (<code>v1a</code>)</dd>" in page
    assert f"<dt>Public key</dt><dd><code>{shown.group(1)}</code></dd>" in page


async def test_no_dashboard_page_shows_a_broker_urls_credentials(
    browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    created = await _post_endpoint(
        browser, csrf, kind="rabbitmq", url=AMQP_URL, destination="orders"
    )
    found = ENDPOINT.search(created.text)
    assert found
    endpoint_id = found.group(1)
    base = f"/dashboard/endpoints/{endpoint_id}"
    pages = {"the creation": created.text}
    for path in (
        "/dashboard",
        "/dashboard/endpoints",
        base,
        "/dashboard/events",
        "/dashboard/deliveries",
        f"/dashboard/deliveries?endpoint_id={endpoint_id}",
    ):
        answer = await browser.get(path)
        assert answer.status_code == 200, path
        pages[path] = answer.text
    pages["the rotation"] = (await browser.post(f"{base}/rotate", data={"csrf_token": csrf})).text
    etag = await _etag(browser, endpoint_id)
    disabled = await browser.post(
        f"{base}/enabled", data={"csrf_token": csrf, "enabled": "false", "etag": etag}
    )
    pages["the disabled endpoint"] = (await browser.get(disabled.headers["location"])).text
    assert "<dd>amqps://broker.example.com/orders-vhost</dd>" in pages[base]
    for name, shown in pages.items():
        assert BROKER_PASSWORD not in shown, name
        assert BROKER_USER not in shown, name
