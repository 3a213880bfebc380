"""The dashboard's recover form reads `since` with the one RFC 3339 parser (both backends): an
HTML local time is UTC, and a moment no `datetime` holds in UTC is an error on the page."""

from __future__ import annotations

import httpx
import pytest

from dashboard_support import create_endpoint, log_in


@pytest.mark.parametrize(
    ("since", "answer"),
    [
        ("2020-01-01T00:00", "deliveries queued again"),
        ("2020-01-01T00:00:00", "deliveries queued again"),
        ("2020-01-01T00:00:00+14:00", "deliveries queued again"),
        ("0001-01-01T00:00:00+14:00", "years 0001-9999 in UTC"),
        ("9999-12-31T23:59:59-14:00", "years 0001-9999 in UTC"),
        ("yesterday", "Not a time: &#39;yesterday&#39;"),
    ],
)
async def test_the_recover_form_reads_since_or_says_why_not(
    browser: httpx.AsyncClient, api_key: str, since: str, answer: str
) -> None:
    csrf = await log_in(browser, api_key)
    endpoint_id, _ = await create_endpoint(browser, csrf, "https://example.com/recover")
    recovered = await browser.post(
        f"/dashboard/endpoints/{endpoint_id}/recover", data={"csrf_token": csrf, "since": since}
    )
    assert recovered.status_code == 200
    assert answer in recovered.text
