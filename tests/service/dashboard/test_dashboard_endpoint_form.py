"""The dashboard's "add an endpoint" form takes what the API's body takes: ordering,
`max_in_flight` and `rate_limit` (issue 28), through the same model and operation, and shows the
API's own message for what the API refuses."""

from __future__ import annotations

import html
import re

import httpx
import pytest
from fastapi import FastAPI

from dashboard_support import ENDPOINT, log_in

ALERT = re.compile(r'<p class="error" role="alert">(.*?)</p>', re.DOTALL)
HOOK = "https://hooks.example.com/form"


def _api(app: FastAPI, api_key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://testserver",
        headers={"authorization": f"Bearer {api_key}"},
    )


async def test_the_form_sets_ordering_window_and_rate_limit(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    form = await browser.get("/dashboard/endpoints")
    for field in ('name="ordering"', 'name="max_in_flight"', 'name="rate_limit"'):
        assert field in form.text
    created = await browser.post(
        "/dashboard/endpoints",
        data={
            "csrf_token": csrf,
            "url": HOOK,
            "events": "payment.*",
            "ordering": "fifo",
            "max_in_flight": "3",
            "rate_limit": "2.5",
        },
    )
    assert created.status_code == 200, created.text
    assert 'role="alert"' not in created.text
    endpoint_id = ENDPOINT.search(created.text)
    assert endpoint_id, created.text
    async with _api(app, api_key) as api:
        stored = (await api.get(f"/v1/webhook-endpoints/{endpoint_id.group(1)}")).json()
    assert {k: stored[k] for k in ("ordering", "max_in_flight", "rate_limit")} == {
        "ordering": "fifo",
        "max_in_flight": 3,
        "rate_limit": 2.5,
    }
    page = (await browser.get(f"/dashboard/endpoints/{endpoint_id.group(1)}")).text
    assert "<dt>Max in flight</dt><dd>3</dd>" in page
    assert "<dt>Rate limit</dt><dd>2.5 per second</dd>" in page


async def test_empty_fields_take_the_apis_defaults(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str
) -> None:
    csrf = await log_in(browser, api_key)
    fields = {"url": HOOK, "max_in_flight": "", "rate_limit": " "}
    created = await browser.post("/dashboard/endpoints", data={"csrf_token": csrf, **fields})
    endpoint_id = ENDPOINT.search(created.text)
    assert endpoint_id, created.text
    async with _api(app, api_key) as api:
        stored = (await api.get(f"/v1/webhook-endpoints/{endpoint_id.group(1)}")).json()
    assert (stored["ordering"], stored["max_in_flight"], stored["rate_limit"]) == (
        "unordered",
        8,
        None,
    )


@pytest.mark.parametrize(
    ("form", "member"),
    [
        ({"ordering": "random"}, '"ordering": "random"'),
        ({"max_in_flight": "0"}, '"max_in_flight": 0'),
        ({"max_in_flight": "257"}, '"max_in_flight": 257'),
        ({"max_in_flight": "2.5"}, '"max_in_flight": 2.5'),
        ({"max_in_flight": "many"}, '"max_in_flight": "many"'),
        ({"rate_limit": "0.001"}, '"rate_limit": 0.001'),
        ({"rate_limit": "1e400"}, '"rate_limit": 1e400'),
        ({"rate_limit": "fast"}, '"rate_limit": "fast"'),
    ],
)
async def test_a_refused_value_shows_the_apis_message(
    app: FastAPI, browser: httpx.AsyncClient, api_key: str, form: dict[str, str], member: str
) -> None:
    """The form's field holds what the API body's member would (`member`, raw JSON)."""
    async with _api(app, api_key) as api:
        answer = await api.post(
            "/v1/webhook-endpoints",
            content=f'{{"url": "{HOOK}", {member}}}',
            headers={"content-type": "application/json"},
        )
    problem = answer.json()
    assert problem["type"].endswith("/validation-error"), problem
    [error] = problem["errors"]
    csrf = await log_in(browser, api_key)
    refused = await browser.post(
        "/dashboard/endpoints", data={"csrf_token": csrf, "url": HOOK, **form}
    )
    assert refused.status_code == 200, refused.text
    alert = ALERT.search(refused.text)
    assert alert, refused.text
    assert f"{next(iter(form))}: {error['message']}" in html.unescape(alert.group(1))
    assert "No endpoints yet." in refused.text
