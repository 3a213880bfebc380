"""Text no backend can store is a 422 at the edge (found by Schemathesis: NUL was a 500)."""

from __future__ import annotations

import httpx
import pytest

from ustun.service.plumbing.text import storable


@pytest.mark.parametrize("bad", ["a\x00b", "\udc4e", "ok \ud864 then"])
def test_unstorable_text_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"NUL|Unicode"):
        storable(bad)


def test_any_other_text_passes() -> None:
    assert storable("títle \u00e0 \U0001f600 \t\n") == "títle \u00e0 \U0001f600 \t\n"


@pytest.mark.parametrize("title", ["\b\x0e1\x00", "\udac0\udc4e x \ud864"])
async def test_documents_refuse_it_with_a_validation_problem(
    client: httpx.AsyncClient, title: str
) -> None:
    body = '{"title": %s, "body": "x"}' % ('"' + "".join(f"\\u{ord(c):04x}" for c in title) + '"')
    response = await client.post(
        "/v1/documents", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "body.title"


@pytest.mark.parametrize("field", ["url", "description"])
async def test_webhook_endpoints_refuse_it_too(client: httpx.AsyncClient, field: str) -> None:
    body = {"url": "https://example.com/hook", "description": "d"}
    body[field] += "\x00"
    response = await client.post("/v1/webhook-endpoints", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == f"body.{field}"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/payments", {"amount": 100, "currency": "EUR", "description": "a\x00"}, "description"),
        (
            "/v1/transfers",
            {"from": "la_\x00", "to": "la_x", "amount": 1, "currency": "EUR"},
            "from",
        ),
    ],
)
async def test_idempotent_creates_refuse_it_too(
    client: httpx.AsyncClient, path: str, body: dict[str, object], field: str
) -> None:
    response = await client.post(path, json=body, headers={"idempotency-key": f"nul-{field}"})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == f"body.{field}"


async def test_an_order_id_beyond_64_bits_is_a_validation_problem(
    client: httpx.AsyncClient,
) -> None:
    body = {"amount": 215, "currency": "EUR", "order_id": -1277930459853433339904}
    response = await client.post("/v1/payments", json=body, headers={"idempotency-key": "big"})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "body.order_id"
