"""OpenAPI 3.1 for the service: FastAPI's document, completed with what it cannot infer.

Added to every operation: its problem responses (one shared `application/problem+json`
schema), the bearer security scheme on `/v1/`, the `Idempotency-Key`, `If-Match` and
`If-None-Match` headers where the route honours them, and a `webhooks` section with one
entry per event type (from the same `EventDoc`s as the AsyncAPI document).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI

from ustun.http.problem import CATALOGUE, MEDIA_TYPE
from ustun.service.event_docs import SIGNATURE_HEADERS, EventDoc, envelope_schema

PROBLEM_REF = "#/components/schemas/Problem"
SECURITY_SCHEME = "bearerAuth"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details; `type` resolves to a page about the problem.",
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string", "description": "`<server>/problems/<slug>`."},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "`urn:ustun:request:<request id>`."},
        "errors": {
            "type": "array",
            "description": "Per-field errors of a `validation-error`.",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                },
            },
        },
    },
    "additionalProperties": True,
}

_HEADER_DOCS: Mapping[str, str] = {
    "idempotency-key": (
        "A unique key (1-255 visible ASCII characters, a UUIDv4 is ideal) that makes a retry "
        "of this request return the stored result instead of acting twice."
    ),
    "if-match": "The ETag you last read; the write happens only if it is still current.",
    "if-none-match": "An ETag you hold; the answer is 304 Not Modified if it is still current.",
}

Idempotency = Literal["required", "optional"]


@dataclass(frozen=True, slots=True)
class Headers:
    """The request headers a route honours, for routes whose middleware enforces them."""

    idempotency: Idempotency | None = None
    if_match: bool = False
    if_none_match: bool = False


# Headers enforced by middleware rather than declared as parameters, by (method, path).
ROUTE_HEADERS: Mapping[tuple[str, str], Headers] = {}


def problem_responses(*slugs: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route decorator: the business problems the route can answer with."""
    by_status: dict[int | str, dict[str, Any]] = {}
    for slug in slugs:
        entry = by_status.setdefault(
            CATALOGUE[slug].status, {"description": CATALOGUE[slug].title, "x-problems": []}
        )
        entry["x-problems"].append(slug)
    return by_status


def _header(name: str, *, required: bool) -> dict[str, Any]:
    display = "-".join(part.capitalize() for part in name.split("-"))
    return {
        "name": display,
        "in": "header",
        "required": required,
        "description": _HEADER_DOCS[name],
        "schema": {"type": "string", "minLength": 1, "maxLength": 1024},
    }


def _problem_response(slugs: Iterable[str]) -> dict[str, Any]:
    listed = sorted(set(slugs))
    names = ", ".join(f"`{s}`" for s in listed)
    titles = "; ".join(CATALOGUE[s].title for s in listed if s in CATALOGUE)
    return {
        "description": f"{titles} (problem type {names}).",
        "content": {MEDIA_TYPE: {"schema": {"$ref": PROBLEM_REF}}},
        "x-problems": listed,
    }


def _problems_of(path: str, operation: dict[str, Any], headers: Headers) -> dict[int, set[str]]:
    """The problem types an operation can answer with, by status."""
    problems: dict[int, set[str]] = {500: {"internal-error"}}

    def add(slug: str) -> None:
        problems.setdefault(CATALOGUE[slug].status, set()).add(slug)

    if path.startswith("/v1/"):
        add("unauthorized")
    if "{" in path:
        add("not-found")
    if operation.get("parameters") or operation.get("requestBody"):
        add("validation-error")
    if headers.idempotency:
        for slug in (
            "idempotency-key-invalid",
            "idempotency-in-progress",
            "idempotency-key-reused",
        ):
            add(slug)
        if headers.idempotency == "required":
            add("idempotency-key-missing")
    if headers.if_match:
        add("precondition-required")
        add("precondition-failed")
    for status, response in operation.get("responses", {}).items():
        for slug in response.get("x-problems", ()):
            problems.setdefault(int(status), set()).add(slug)
    return problems


def _declared(operation: dict[str, Any]) -> Headers:
    """The headers a route declares itself (as FastAPI `Header` parameters)."""
    names = {
        p["name"].lower(): p.get("required", False)
        for p in operation.get("parameters", [])
        if p.get("in") == "header"
    }
    idempotency: Idempotency | None = None
    if "idempotency-key" in names:
        idempotency = "required" if names["idempotency-key"] else "optional"
    return Headers(idempotency, "if-match" in names, "if-none-match" in names)


def _merge(a: Headers, b: Headers) -> Headers:
    return Headers(
        a.idempotency or b.idempotency, a.if_match or b.if_match, a.if_none_match or b.if_none_match
    )


def _complete_operation(path: str, method: str, operation: dict[str, Any], extra: Headers) -> None:
    headers = _merge(_declared(operation), extra)
    params: list[dict[str, Any]] = operation.setdefault("parameters", [])
    present = {p["name"].lower() for p in params if p.get("in") == "header"}
    if headers.idempotency and "idempotency-key" not in present:
        params.append(_header("idempotency-key", required=headers.idempotency == "required"))
    if headers.if_match and "if-match" not in present:
        params.append(_header("if-match", required=True))
    if headers.if_none_match and "if-none-match" not in present:
        params.append(_header("if-none-match", required=False))
    if not params:
        del operation["parameters"]

    responses: dict[str, Any] = operation.setdefault("responses", {})
    for code, slugs in _problems_of(path, operation, headers).items():
        responses[str(code)] = _problem_response(slugs)
    if headers.if_none_match and method == "get":
        responses["304"] = {"description": "Not Modified: your copy (If-None-Match) is current."}
    if headers.idempotency:
        for status, response in responses.items():
            if status.startswith("2"):
                response.setdefault("headers", {})["Idempotent-Replayed"] = {
                    "description": "`true` when this is the stored response of an earlier try.",
                    "schema": {"type": "string", "enum": ["true"]},
                }
    if path.startswith("/v1/"):
        operation["security"] = [{SECURITY_SCHEME: []}]


def _webhook(doc: EventDoc) -> dict[str, Any]:
    return {
        "post": {
            "summary": doc.type,
            "description": doc.description,
            "operationId": f"webhook_{doc.name}",
            "tags": ["webhooks"],
            "parameters": [
                {"name": name, "in": "header", "required": True, **spec}
                for name, spec in SIGNATURE_HEADERS.items()
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{doc.name}"}}
                },
            },
            "responses": {
                "200": {"description": "Any 2xx within the timeout acknowledges the event."},
                "410": {"description": "Gone: the endpoint is disabled at once."},
            },
        }
    }


def complete(
    schema: Mapping[str, Any],
    events: Sequence[EventDoc],
    headers: Mapping[tuple[str, str], Headers],
) -> dict[str, Any]:
    """A completed copy of FastAPI's `schema` (see the module docstring)."""
    doc = copy.deepcopy(dict(schema))
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["Problem"] = PROBLEM_SCHEMA
    components["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `ustun keys create`: `Authorization: Bearer <key>`.",
        }
    }
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            extra = headers.get((method.upper(), path), Headers())
            _complete_operation(path, method, operation, extra)
    if events:
        doc["webhooks"] = {e.type: _webhook(e) for e in events}
        for event in events:
            schemas[event.name] = envelope_schema(event)
    return doc


def install(
    app: FastAPI,
    events: Callable[[], Sequence[EventDoc]],
    headers: Mapping[tuple[str, str], Headers] = ROUTE_HEADERS,
) -> None:
    """Serve the completed document at `/openapi.json` (and so in `/docs`)."""
    generate = app.openapi
    cache: dict[int, dict[str, Any]] = {}

    def openapi() -> dict[str, Any]:
        base = generate()
        if id(base) not in cache:
            cache.clear()
            cache[id(base)] = complete(base, events(), headers)
        return cache[id(base)]

    app.openapi = openapi  # type: ignore[method-assign]
