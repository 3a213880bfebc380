"""`GET /v1/event-types` serves the service's catalogue, registered through
`ustun.webhooks.catalog` like a library user's: the fields it always had, and now each type's
version, versions, example and `deprecated` (both backends)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from jsonschema import Draft202012Validator

from support import problem_of
from ustun.service.specs.event_docs import openapi_webhooks
from ustun.service.specs.event_types import CATALOGUE, SERVICE_EVENTS, registered
from ustun.webhooks import catalog
from ustun.webhooks.catalog import Catalog

PAYMENT = {"amount": 5, "currency": "EUR"}


def test_the_service_registers_every_declared_event_type() -> None:
    assert [t.name for t in SERVICE_EVENTS] == [t.name for t in CATALOGUE]
    for declared in CATALOGUE:
        registered = SERVICE_EVENTS.get(declared.name)
        assert registered is not None
        assert (registered.schema, registered.thin) == (declared.schema, declared.thin)


async def test_event_types_keep_their_fields_and_add_versions(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/event-types")
    assert response.status_code == 200
    types = response.json()["data"]
    assert [t["name"] for t in types] == [t.name for t in CATALOGUE]
    for served in types:
        declared = SERVICE_EVENTS.get(served["name"])
        assert declared is not None
        assert served["description"] == declared.description
        assert served["schema"] == declared.schema
        assert served["version"] == 1
        assert served["versions"] == [{"version": 1, "schema": declared.schema}]
        assert served["deprecated"] is declared.deprecated
        assert served["example"] == declared.example
        Draft202012Validator.check_schema(served["schema"])


def test_a_deprecated_type_is_a_deprecated_webhook() -> None:
    events = Catalog()
    events.register("invoice.paid", schema={"title": "InvoiceData", "type": "object"})
    events.register(
        "invoice.voided", schema={"title": "InvoiceData", "type": "object"}, deprecated=True
    )
    hooks = openapi_webhooks(list(events))
    assert "deprecated" not in hooks["invoice.paid"]["post"]
    assert hooks["invoice.voided"]["post"]["deprecated"] is True


@contextmanager
def active(events: Catalog) -> Iterator[Catalog]:
    """`events` as the catalogue `emit` validates against, for the block."""
    before = catalog.use(events)
    try:
        yield events
    finally:
        catalog.use(before)


async def test_strict_emit_passes_the_services_own_events(client: httpx.AsyncClient) -> None:
    strict = registered(CATALOGUE)
    strict.strict = True
    with active(strict):
        made = await client.post(
            "/v1/payments", json=PAYMENT, headers={"idempotency-key": uuid.uuid4().hex}
        )
    assert made.status_code == 201, made.text


async def test_strict_emit_of_an_unregistered_type_is_a_422_problem(
    client: httpx.AsyncClient,
) -> None:
    with active(Catalog(strict=True)):
        refused = await client.post(
            "/v1/payments", json=PAYMENT, headers={"idempotency-key": uuid.uuid4().hex}
        )
    problem = problem_of(refused, 422, "validation-error")
    assert problem["errors"][0]["field"] == "type"
    assert "'payment.created' is not in the event catalogue" in problem["detail"]
    listed = (await client.get("/v1/payments")).json()["data"]
    assert listed == []  # the emit's refusal rolled the payment back
