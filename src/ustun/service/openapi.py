"""OpenAPI 3.1 for the service: FastAPI's document, completed with what it cannot infer.

Added to every operation: its problem responses (one shared `application/problem+json`
schema), the bearer security scheme on `/v1/`, the `Idempotency-Key`, `If-Match` and
`If-None-Match` headers where the route honours them, and a `webhooks` section with one
entry per event type (from the event catalogue, like the AsyncAPI document).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI

from ustun.http.problem import CATALOGUE, MEDIA_TYPE
from ustun.service import event_docs
from ustun.service.event_types import EventType

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

Need = Literal["required", "optional"]


@dataclass(frozen=True, slots=True)
class Notes:
    """What a route honours beyond its declared parameters (headers read by middleware or
    dependencies, and the problems its handler raises)."""

    idempotency: Need | None = None
    if_match: Need | None = None
    if_none_match: bool = False
    problems: tuple[str, ...] = ()


_CONDITIONAL_READ = Notes(if_none_match=True)
_CONDITIONAL_WRITE = Notes(if_match="required", problems=("unsupported-media-type",))

# Routes whose headers are read by middleware or dependencies, by (METHOD, path template).
ROUTE_NOTES: Mapping[tuple[str, str], Notes] = {
    ("GET", "/v1/payments/{payment_id}"): _CONDITIONAL_READ,
    ("HEAD", "/v1/payments/{payment_id}"): _CONDITIONAL_READ,
    ("PATCH", "/v1/payments/{payment_id}"): Notes(
        if_match="required", problems=("state-conflict", "unsupported-media-type")
    ),
    ("GET", "/v1/documents/{document_id}"): _CONDITIONAL_READ,
    ("HEAD", "/v1/documents/{document_id}"): _CONDITIONAL_READ,
    # PUT takes If-Match to replace, or If-None-Match: * to create; one of them is required.
    ("PUT", "/v1/documents/{document_id}"): Notes(
        if_match="optional", if_none_match=True, problems=("precondition-required",)
    ),
    ("PATCH", "/v1/documents/{document_id}"): _CONDITIONAL_WRITE,
    ("DELETE", "/v1/documents/{document_id}"): Notes(if_match="required"),
    ("GET", "/v1/jobs/{job_id}"): _CONDITIONAL_READ,
    ("HEAD", "/v1/jobs/{job_id}"): _CONDITIONAL_READ,
    ("POST", "/v1/jobs/{job_id}/cancel"): Notes(problems=("state-conflict",)),
    ("GET", "/v1/ledger-accounts/{ledger_account_id}"): _CONDITIONAL_READ,
    # A `from` or `to` naming no ledger account of this account is a 404.
    ("POST", "/v1/transfers"): Notes(
        problems=("not-found", "insufficient-funds", "balance-limit-exceeded")
    ),
    ("POST", "/v1/webhook-endpoints"): Notes(problems=("quota-exceeded",)),
    ("PATCH", "/v1/webhook-endpoints/{endpoint_id}"): Notes(if_match="optional"),
    ("DELETE", "/v1/webhook-endpoints/{endpoint_id}"): Notes(if_match="optional"),
    ("POST", "/v1/webhook-endpoints/{endpoint_id}/test"): Notes(
        problems=("state-conflict", "rate-limited")
    ),
    ("POST", "/v1/webhook-endpoints/{endpoint_id}/recover"): Notes(problems=("state-conflict",)),
    ("POST", "/v1/deliveries/{delivery_id}/retry"): Notes(problems=("state-conflict",)),
}


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


def _problems_of(path: str, operation: dict[str, Any], notes: Notes) -> dict[int, set[str]]:
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
    if operation.get("requestBody"):
        for slug in ("bad-request", "payload-too-large", "unsupported-media-type"):
            add(slug)
    if notes.idempotency:
        for slug in (
            "idempotency-key-invalid",
            "idempotency-in-progress",
            "idempotency-key-reused",
        ):
            add(slug)
        if notes.idempotency == "required":
            add("idempotency-key-missing")
    if notes.if_match or (notes.if_none_match and operation.get("requestBody")):
        add("precondition-failed")
    if notes.if_match == "required":
        add("precondition-required")
    for slug in notes.problems:
        add(slug)
    for status, response in operation.get("responses", {}).items():
        for slug in response.get("x-problems", ()):
            problems.setdefault(int(status), set()).add(slug)
    return problems


def _declared(operation: dict[str, Any]) -> Notes:
    """What a route declares itself (headers as FastAPI `Header` or `openapi_extra` params)."""
    names = {
        p["name"].lower(): p.get("required", False)
        for p in operation.get("parameters", [])
        if p.get("in") == "header"
    }

    def need(name: str) -> Need | None:
        if name not in names:
            return None
        return "required" if names[name] else "optional"

    return Notes(need("idempotency-key"), need("if-match"), "if-none-match" in names)


def _merge(a: Notes, b: Notes) -> Notes:
    return Notes(
        a.idempotency or b.idempotency,
        a.if_match or b.if_match,
        a.if_none_match or b.if_none_match,
        a.problems + b.problems,
    )


def _complete_operation(path: str, method: str, operation: dict[str, Any], extra: Notes) -> None:
    notes = _merge(_declared(operation), extra)
    params: list[dict[str, Any]] = operation.setdefault("parameters", [])
    present = {p["name"].lower() for p in params if p.get("in") == "header"}
    if notes.idempotency and "idempotency-key" not in present:
        params.append(_header("idempotency-key", required=notes.idempotency == "required"))
    if notes.if_match and "if-match" not in present:
        params.append(_header("if-match", required=notes.if_match == "required"))
    if notes.if_none_match and "if-none-match" not in present:
        params.append(_header("if-none-match", required=False))
    if not params:
        del operation["parameters"]

    responses: dict[str, Any] = operation.setdefault("responses", {})
    for code, slugs in _problems_of(path, operation, notes).items():
        responses[str(code)] = _problem_response(slugs)
    if notes.if_none_match and method in ("get", "head"):
        responses["304"] = {"description": "Not Modified: your copy (If-None-Match) is current."}
    if notes.idempotency:
        for status, response in responses.items():
            if status.startswith("2"):
                response.setdefault("headers", {})["Idempotent-Replayed"] = {
                    "description": "`true` when this is the stored response of an earlier try.",
                    "schema": {"type": "string", "enum": ["true"]},
                }
    if path.startswith("/v1/"):
        operation["security"] = [{SECURITY_SCHEME: []}]


def complete(
    schema: Mapping[str, Any],
    events: Sequence[EventType],
    notes: Mapping[tuple[str, str], Notes],
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
            extra = notes.get((method.upper(), path), Notes())
            _complete_operation(path, method, operation, extra)
    if events:
        doc["webhooks"] = event_docs.openapi_webhooks(events)
        schemas.update(event_docs.schemas(events))
    return doc


def install(
    app: FastAPI,
    events: Callable[[], Sequence[EventType]],
    notes: Mapping[tuple[str, str], Notes] = ROUTE_NOTES,
) -> None:
    """Serve the completed document at `/openapi.json` (and so in `/docs`)."""
    generate = app.openapi
    cache: dict[int, dict[str, Any]] = {}

    def openapi() -> dict[str, Any]:
        base = generate()
        if id(base) not in cache:
            cache.clear()
            cache[id(base)] = complete(base, events(), notes)
        return cache[id(base)]

    app.openapi = openapi  # type: ignore[method-assign]
