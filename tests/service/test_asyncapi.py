"""`/asyncapi.json`, `/asyncapi.yaml`: AsyncAPI 3.0 the official parser accepts (as 3.1.0 too)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from ustun.service import create_app
from ustun.service.specs import asyncapi
from ustun.service.specs.event_types import EventType
from ustun.settings import Settings

TOOLS = Path(__file__).parent.parent / "contracts"


def official_parser_verdict(document: dict[str, object], tmp_path: Path) -> dict[str, object]:
    """Run `@asyncapi/parser` (npm, installed by `.ci/run`) on `document`."""
    if not (TOOLS / "node_modules" / "@asyncapi" / "parser").is_dir():
        pytest.fail(f"run `npm ci --prefix {TOOLS}` (.ci/run does) to install @asyncapi/parser")
    path = tmp_path / "asyncapi.json"
    path.write_text(json.dumps(document))
    node = shutil.which("node") or "node"
    done = subprocess.run(
        [node, str(TOOLS / "validate_asyncapi.mjs"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=TOOLS,
    )
    verdict: dict[str, object] = json.loads(done.stdout)
    return verdict


def test_the_official_parser_accepts_the_document(
    event_types: tuple[EventType, ...], tmp_path: Path
) -> None:
    document = asyncapi.document(event_types, api_url="http://127.0.0.1:8000")
    verdict = official_parser_verdict(document, tmp_path)
    problems = [d for d in verdict["diagnostics"] if d["severity"] in ("error", "warning")]  # type: ignore[attr-defined]
    assert verdict["valid"], problems
    assert problems == []


def test_the_document_is_valid_as_asyncapi_3_1_0_as_well(
    event_types: tuple[EventType, ...], tmp_path: Path
) -> None:
    """Moving to 3.1.0 (once generators take it) is a change of `asyncapi.VERSION` alone."""
    document = asyncapi.document(event_types) | {"asyncapi": "3.1.0"}
    verdict = official_parser_verdict(document, tmp_path)
    assert verdict["valid"]
    assert verdict["diagnostics"] == []


def test_the_official_parser_is_really_checking(
    event_types: tuple[EventType, ...], tmp_path: Path
) -> None:
    document = asyncapi.document(event_types)
    next(iter(document["operations"].values()))["action"] = "publish"
    assert not official_parser_verdict(document, tmp_path)["valid"]


def test_broker_endpoints_have_servers_and_bindings_the_parser_checks(
    event_types: tuple[EventType, ...], tmp_path: Path
) -> None:
    document = asyncapi.document(event_types)
    servers = document["servers"]
    assert (servers["rabbitmq"]["protocol"], servers["nats"]["protocol"]) == ("amqp", "nats")
    channel = document["channels"]["paymentSucceeded"]
    assert channel["bindings"]["amqp"]["is"] == "routingKey"
    operation = document["operations"]["sendPaymentSucceeded"]
    assert operation["bindings"]["amqp"]["deliveryMode"] == 2
    assert set(operation["bindings"]) == {"amqp", "nats"}
    message = document["components"]["messages"]["PaymentSucceeded"]
    assert message["bindings"]["amqp"]["messageType"] == "payment.succeeded"
    operation["bindings"]["amqp"]["deliveryMode"] = 3
    assert not official_parser_verdict(document, tmp_path)["valid"]


def test_one_channel_and_send_operation_per_event_type(event_types: tuple[EventType, ...]) -> None:
    document = asyncapi.document(event_types)
    assert document["asyncapi"] == "3.0.0"
    assert {c["title"] for c in document["channels"].values()} == {t.name for t in event_types}
    operations = document["operations"]
    assert {op["action"] for op in operations.values()} == {"send"}
    schemas = document["components"]["schemas"]
    message = document["components"]["messages"]["PaymentSucceeded"]
    assert message["headers"] == {"$ref": "#/components/schemas/WebhookHeaders"}
    assert set(schemas["WebhookHeaders"]["required"]) == {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
    assert message["payload"] == {"$ref": "#/components/schemas/PaymentSucceededEvent"}
    payload = schemas["PaymentSucceededEvent"]
    assert payload["properties"]["type"]["const"] == "payment.succeeded"
    assert schemas["PaymentEventData"]["oneOf"] == [
        {"$ref": "#/components/schemas/PaymentData"},
        {"$ref": "#/components/schemas/ThinEventData"},
    ]
    scheme = document["components"]["securitySchemes"]["webhookSignature"]
    assert scheme["name"] == "webhook-signature"
    assert "HMAC-SHA256" in scheme["description"]


def test_every_schema_is_named_and_every_model_is_a_component(
    event_types: tuple[EventType, ...], tmp_path: Path
) -> None:
    """Generators name a model by its title or its component name, else `AnonymousSchemaN`."""
    found = official_parser_verdict(asyncapi.document(event_types), tmp_path)["schemas"]
    assert len(found) > 50  # type: ignore[arg-type]
    untitled = [s["id"] for s in found if not s["title"]]  # type: ignore[attr-defined]
    assert untitled == []
    inline = [s["title"] for s in found if s["structured"] and s["id"].startswith("<")]  # type: ignore[attr-defined]
    assert inline == []


async def test_served_as_json_and_yaml_alike(
    settings: Settings, event_types: tuple[EventType, ...]
) -> None:
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        as_json = await http.get("/asyncapi.json")
        as_yaml = await http.get("/asyncapi.yaml")
    assert as_json.status_code == as_yaml.status_code == 200
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(as_yaml.text) == as_json.json()
    assert "payment.succeeded" in as_json.text
