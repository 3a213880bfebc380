"""The event catalogue: registration and its bounds, versions, and `emit`'s strict validation
through the real outbox on both databases."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from support import sync_connection
from ustun.errors import ProblemError
from ustun.store import Database
from ustun.webhooks import catalog
from ustun.webhooks.catalog import MAX_SCHEMA_BYTES, Catalog
from ustun.webhooks.patterns import is_pattern
from ustun.webhooks.sending.outbox import OWN_TYPES, emit, emit_on
from ustun.webhooks.tables import events

INVOICE = {
    "title": "InvoiceData",
    "type": "object",
    "required": ["id", "amount"],
    "properties": {
        "id": {"type": "string", "pattern": "^in_"},
        "amount": {"type": "integer", "minimum": 1},
        "lines": {"type": "array", "items": {"type": "object", "required": ["sku"]}},
    },
}


class Refund(BaseModel):
    """A refund, as a library user's pydantic model."""

    id: str
    amount: int = Field(ge=1)


def test_a_json_schema_and_a_pydantic_model_register() -> None:
    events = Catalog()
    paid = events.register(
        "invoice.paid", schema=INVOICE, description="Paid.", example={"id": "in_1", "amount": 5}
    )
    refunded = events.register("refund.created", schema=Refund)
    assert (paid.version, paid.deprecated, paid.example) == (1, False, {"id": "in_1", "amount": 5})
    assert refunded.schema["required"] == ["id", "amount"]
    assert [t.name for t in events] == ["invoice.paid", "refund.created"]
    assert "invoice.paid" in events
    assert events.get("nope") is None


def test_versions_are_numbered_and_the_latest_is_current() -> None:
    events = Catalog()
    events.register("invoice.paid", schema=INVOICE, description="Paid.")
    v2 = {**INVOICE, "required": ["id", "amount", "currency"]}
    current = events.register("invoice.paid", schema=v2, version=2, deprecated=True)
    assert (current.version, current.versions, current.deprecated) == (2, (INVOICE, v2), True)
    assert current.description == "Paid."  # kept from version 1 when not given again
    with pytest.raises(ProblemError) as refused:
        events.check("invoice.paid", {"id": "in_1", "amount": 5})
    assert refused.value.extensions["errors"][0]["field"] == "data"
    for version in (1, 2, 4):
        with pytest.raises(ValueError, match="the next version is 3"):
            events.register("invoice.paid", schema=INVOICE, version=version)


@pytest.mark.parametrize(
    ("name", "schema", "message"),
    [
        ("Invoice.Paid", INVOICE, "dot-separated lowercase"),
        ("invoice.*", INVOICE, "dot-separated lowercase"),
        ("x" * 101, INVOICE, "at most 100"),
        ("invoice.paid", {"type": "banana"}, "not a valid JSON Schema at type"),
        ("invoice.paid", {"properties": {"a": {"minimum": "one"}}}, "at properties/a/minimum"),
        ("invoice.paid", {"default": object()}, "not JSON"),
        ("invoice.paid", ["not", "a", "dict"], "a JSON Schema dict or a pydantic model"),
        ("invoice.paid", {"enum": ["x" * 1000] * 70}, f"over {MAX_SCHEMA_BYTES}"),
    ],
)
def test_bad_input_is_refused_by_name(name: str, schema: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Catalog().register(name, schema=schema)


def test_an_example_its_schema_refuses_is_refused() -> None:
    with pytest.raises(ValueError, match="example does not match"):
        Catalog().register("invoice.paid", schema=INVOICE, example={"id": "x"})


def test_registering_copies_the_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    event = Catalog().register("a.b", schema=schema)
    schema["properties"] = {}
    assert event.schema["properties"] == {"a": {"type": "integer"}}


@given(st.from_regex(r"[a-zA-Z0-9_.*-]{1,12}", fullmatch=True))
def test_a_name_registers_exactly_when_it_is_a_filter_without_wildcard(name: str) -> None:
    fits = is_pattern(name) and "*" not in name
    try:
        Catalog().register(name, schema={"type": "object"})
    except ValueError:
        assert not fits
    else:
        assert fits


@given(st.dictionaries(st.sampled_from(["id", "amount", "lines", "x"]), st.integers() | st.text()))
def test_check_refuses_exactly_what_the_schema_refuses(data: dict[str, Any]) -> None:
    events = Catalog()
    events.register("invoice.paid", schema=INVOICE)
    valid = (
        isinstance(data.get("id"), str)
        and data["id"].startswith("in_")
        and isinstance(data.get("amount"), int)
        and data["amount"] >= 1
        and "lines" not in data
    )
    if valid:
        events.check("invoice.paid", data)
    else:
        with pytest.raises(ProblemError, match="Invalid value in data"):
            events.check("invoice.paid", data)


def test_the_refusal_names_each_failing_path() -> None:
    events = Catalog()
    events.register("invoice.paid", schema=INVOICE)
    with pytest.raises(ProblemError) as refused:
        events.check("invoice.paid", {"id": "in_1", "amount": 0, "lines": [{"sku": 1}, {}]})
    fields = [e["field"] for e in refused.value.extensions["errors"]]
    assert fields == ["data.amount", "data.lines.1"]
    assert refused.value.detail.startswith("Invalid value in data.amount, data.lines.1")
    with pytest.raises(ProblemError, match=r"'invoice\.void' is not in the event catalogue"):
        events.check("invoice.void", {})


@pytest.fixture
def strict() -> Iterator[Catalog]:
    """A strict catalogue made the active one for the test, the previous one restored."""
    events = Catalog(strict=True)
    events.register("invoice.paid", schema=INVOICE)
    before = catalog.use(events)
    yield events
    catalog.use(before)


async def _count(db: Database, account_id: str) -> int:
    async with db.read() as conn:
        found = await conn.scalar(
            select(func.count()).select_from(events).where(events.c.account_id == account_id)
        )
    return int(found or 0)


async def test_strict_emit_refuses_bad_data_and_unknown_types(
    db: Database, account_id: str, strict: Catalog
) -> None:
    async with db.unit_of_work() as uow:
        await emit(uow, account_id, "invoice.paid", {"id": "in_1", "amount": 5})
        with pytest.raises(ProblemError, match=r"data\.amount"):
            await emit(uow, account_id, "invoice.paid", {"id": "in_2", "amount": -1})
        with pytest.raises(ProblemError, match="not in the event catalogue"):
            await emit(uow, account_id, "invoice.void", {"id": "in_3"})
    assert await _count(db, account_id) == 1
    strict.strict = False
    async with db.unit_of_work() as uow:
        await emit(uow, account_id, "invoice.void", {"anything": True})
    assert await _count(db, account_id) == 2


async def test_strict_emit_lets_ustuns_own_events_through(
    db: Database, account_id: str, strict: Catalog
) -> None:
    """The app's catalogue lists its events, not ustun's: a dead letter's report or an
    endpoint's test ping is written under a strict catalogue that lacks them."""
    async with db.unit_of_work() as uow:
        for own in sorted(OWN_TYPES):
            await emit(uow, account_id, own, {"endpoint_id": "ep_1"})
    assert await _count(db, account_id) == len(OWN_TYPES)


async def test_emit_is_not_checked_by_default(db: Database, account_id: str) -> None:
    assert not catalog.active.strict
    async with db.unit_of_work() as uow:
        await emit(uow, account_id, "never.registered", {"any": "thing"})
    assert await _count(db, account_id) == 1


def test_strict_emit_on_a_host_connection(database_url: str, strict: Catalog) -> None:
    with sync_connection(database_url) as conn:
        emit_on(conn, "invoice.paid", {"id": "in_1", "amount": 5}, account="catalogue")
        with pytest.raises(ProblemError, match=r"data\.id"):
            emit_on(conn, "invoice.paid", {"id": "nope", "amount": 5}, account="catalogue")


def test_emit_without_a_catalogue_loads_no_schema_library() -> None:
    """`jsonschema` (~70 ms to import) and pydantic load only once something is registered."""
    code = (
        "import sys, ustun.webhooks.sending.outbox; "
        "print([m for m in ('jsonschema', 'pydantic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
