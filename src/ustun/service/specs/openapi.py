"""OpenAPI 3.1 for the service: FastAPI's document, completed with what it cannot infer.

Handlers build their responses themselves, so FastAPI sees neither their bodies nor their
headers. `ROUTE_NOTES` says, per route, what it answers (`Reply`: a model from
`service/specs/schemas.py` or raw media types, headers, links to the next calls) and what it honours
(headers read by middleware or dependencies, problems its handler raises). Every operation
also gets its problem responses (one shared `application/problem+json` schema), the bearer
security scheme on `/v1/`, the `Idempotency-Key` on every POST/PATCH the idempotency
middleware covers (with the key's grammar), and a `webhooks` section with one entry per event
type (from the event catalogue, like the AsyncAPI document).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ustun.http.problem import CATALOGUE, MEDIA_TYPE
from ustun.idempotency.policy import MARKER
from ustun.service.resources.documents import MERGE_PATCH, PATCH_SCHEMA
from ustun.service.resources.payments import PATCH_MEDIA_TYPES, PaymentCreate, PaymentUpdate
from ustun.service.resources.report_formats import FORMATS
from ustun.service.specs import event_docs, schemas
from ustun.webhooks.catalog import EventType

PROBLEM_REF = schemas.PROBLEM_REF
SECURITY_SCHEME = "bearerAuth"
JSON = "application/json"

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

# RFC 9110 §8.8.3 (entity-tag = [ weak ] DQUOTE *etagc DQUOTE), as `ustun.http.etag` reads
# it, but ASCII only: clients encode header values inconsistently beyond it.
_ENTITY_TAG = r'(?:W/)?"[\x21\x23-\x7e]*"'
# RFC 9110 §13.1.1: If-Match = "*" / #entity-tag (a comma-separated list).
_TAG_LIST = rf"^(?:\*|{_ENTITY_TAG}(?:[ \t]*,[ \t]*{_ENTITY_TAG})*)$"
# `ustun.http.idempotency_key`: a bare key (VCHAR except DQUOTE and ","), or an RFC 8941
# sf-string (§3.3.3) of visible ASCII with `\"` and `\\` escapes; 1 to 255 characters either way.
IDEMPOTENCY_KEY_PATTERN = (
    r'^(?:[\x21\x23-\x2b\x2d-\x7e]{1,255}|"(?:[\x21\x23-\x5b\x5d-\x7e]|\\["\\]){1,255}")$'
)

# Request headers whose grammar the document states, by lower-case name.
_REQUEST_HEADERS: Mapping[str, dict[str, Any]] = {
    "idempotency-key": {
        "description": (
            "A unique key (a UUIDv4 is ideal), reused unchanged on every retry of this request, "
            "so that it takes effect at most once: 1 to 255 visible ASCII characters, bare "
            '(no `"` or `,`) or as an RFC 8941 string `"…"`.'
        ),
        "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
    },
    "if-match": {
        "description": "The ETag you last read (or `*`); the write happens only if it is current. "
        "A value outside this grammar is 400 `precondition-invalid`.",
        "schema": {"type": "string", "pattern": _TAG_LIST},
    },
    # `ustun.http.last_event_id`: a decimal below 2**63 (19 digits may exceed it); 400 otherwise.
    "last-event-id": {
        "description": "The `id:` of the last event you received: the stream resumes after it.",
        "schema": {"type": "string", "pattern": "^[0-9]{0,18}$"},
    },
    # On a read, a value that is no list of tags simply matches nothing (a 200).
    "if-none-match": {
        "description": "An ETag you hold; the answer is 304 Not Modified if it is still current.",
        "schema": {"type": "string"},
    },
}
# On a write, `*` creates only; any other value (malformed too) is left to If-Match.
_CREATE_ONLY = {"description": "`*`: create only if nothing exists at this id (else 412)."}

# Response headers, by the name the service sends.
_RESPONSE_HEADERS: Mapping[str, dict[str, Any]] = {
    "ETag": {
        "description": "Strong entity tag of this representation: `If-Match` for the next write, "
        "`If-None-Match` to revalidate (RFC 9110 §8.8.3).",
        "schema": {"type": "string", "pattern": f"^{_ENTITY_TAG}$"},
    },
    "Last-Modified": {
        "description": "When the resource last changed, an HTTP-date (RFC 9110 §8.8.2).",
        "schema": {"type": "string"},
    },
    "Location": {
        "description": "The URL of the resource this request created (or of the job doing it).",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "Seconds to wait before asking again (RFC 9110 §10.2.3).",
        "schema": {"type": "string"},
    },
    "Idempotent-Replayed": {
        "description": "`true` when this is the stored response of an earlier try with this key.",
        "schema": {"type": "string", "enum": ["true"]},
    },
    "Cache-Control": {
        "description": "`/v1/` answers may be stored, but never reused without revalidation.",
        "schema": {"type": "string"},
    },
    "Content-Disposition": {
        "description": "`attachment` with the file's name.",
        "schema": {"type": "string"},
    },
}

Need = Literal["required", "optional"]


@dataclass(frozen=True, slots=True)
class Link:
    """An OpenAPI link: the call a response leads to, and where its parameters come from."""

    method: str
    path: str
    parameters: Mapping[str, str]
    description: str


@dataclass(frozen=True, slots=True)
class Reply:
    """A success response: its body (a model, or raw media types), headers and links."""

    model: type[BaseModel] | None = None
    media: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    # Header name → whether every such response carries it.
    headers: Mapping[str, bool] = field(default_factory=dict)
    links: Mapping[str, Link] = field(default_factory=dict)
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Body:
    """A request body read by hand (`plumbing/bodies.py`): one named schema, its media types."""

    name: str
    schema: Mapping[str, Any]
    media_types: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Notes:
    """What a route answers and honours beyond what FastAPI sees: its replies by status, a body
    it reads by hand, headers read by middleware or dependencies, and problems it raises."""

    idempotency: Need | None = None
    if_match: Need | None = None
    if_none_match: bool = False
    problems: tuple[str, ...] = ()
    replies: Mapping[int, Reply] = field(default_factory=dict)
    body: Body | None = None


def _by_id(method: str, path: str, param: str, description: str) -> Link:
    return Link(method, path, {param: "$response.body#/id"}, description)


def _conditional(method: str, path: str, param: str, description: str) -> Link:
    parameters = {param: "$response.body#/id", "header.If-Match": "$response.header.ETag"}
    return Link(method, path, parameters, description)


PAYMENT = "/v1/payments/{payment_id}"
DOCUMENT = "/v1/documents/{document_id}"
JOB = "/v1/jobs/{job_id}"
ENDPOINT = "/v1/webhook-endpoints/{endpoint_id}"

_PAYMENT_LINKS = {
    "GetPayment": _by_id("GET", PAYMENT, "payment_id", "Read the payment again."),
    "SettlePayment": _conditional("PATCH", PAYMENT, "payment_id", "Settle it, under its ETag."),
}
_DOCUMENT_LINKS = {
    "GetDocument": _by_id("GET", DOCUMENT, "document_id", "Read the document again."),
    "ReplaceDocument": _conditional("PUT", DOCUMENT, "document_id", "Replace it, under its ETag."),
    "PatchDocument": _conditional("PATCH", DOCUMENT, "document_id", "Merge-patch it."),
    "DeleteDocument": _conditional("DELETE", DOCUMENT, "document_id", "Delete it."),
}
_JOB_LINKS = {
    "GetJob": _by_id("GET", JOB, "job_id", "Poll the job (honour `Retry-After`)."),
    "JobEvents": _by_id("GET", f"{JOB}/events", "job_id", "Follow its progress as events."),
    "JobResult": _by_id("GET", f"{JOB}/result", "job_id", "Download the result once done."),
    "CancelJob": _by_id("POST", f"{JOB}/cancel", "job_id", "Cancel it."),
}
_ENDPOINT_LINKS = {
    "GetEndpoint": _by_id("GET", ENDPOINT, "endpoint_id", "Read the endpoint again."),
    "UpdateEndpoint": _conditional("PATCH", ENDPOINT, "endpoint_id", "Change it, under its ETag."),
    "DeleteEndpoint": _conditional("DELETE", ENDPOINT, "endpoint_id", "Delete it."),
    "TestEndpoint": _by_id("POST", f"{ENDPOINT}/test", "endpoint_id", "Send it a ping."),
    "RotateSecret": _by_id("POST", f"{ENDPOINT}/rotate-secret", "endpoint_id", "Rotate."),
    "EndpointDeliveries": _by_id("GET", "/v1/deliveries", "endpoint_id", "Its deliveries."),
}

_VALIDATORS = {"ETag": True, "Last-Modified": False}
_CREATED = {**_VALIDATORS, "Location": True}
# A job's validators; `Retry-After` while it is not finished.
_JOB_HEADERS = {**_VALIDATORS, "Retry-After": False}


def _resource(model: type[BaseModel], links: Mapping[str, Link]) -> Reply:
    return Reply(model, headers=_VALIDATORS, links=links)


def _created(model: type[BaseModel], links: Mapping[str, Link]) -> Reply:
    return Reply(model, headers=_CREATED, links=links)


def _listing(model: type[BaseModel]) -> Notes:
    return Notes(replies={200: Reply(model)})


_PAYMENT_READ = Notes(if_none_match=True, replies={200: _resource(schemas.Payment, _PAYMENT_LINKS)})
_DOCUMENT_READ = Notes(
    if_none_match=True, replies={200: _resource(schemas.Document, _DOCUMENT_LINKS)}
)
_JOB_READ = Notes(
    if_none_match=True,
    replies={200: Reply(schemas.Job, headers=_JOB_HEADERS, links=_JOB_LINKS)},
)
_LEDGER_READ = Notes(if_none_match=True, replies={200: _resource(schemas.LedgerAccount, {})})
_ENDPOINT_REPLY = Reply(schemas.WebhookEndpoint, headers={"ETag": True}, links=_ENDPOINT_LINKS)
_SECRET_REPLY = Reply(
    schemas.WebhookEndpointWithSecret, headers={"ETag": True}, links=_ENDPOINT_LINKS
)


def _file(media: str) -> dict[str, Any]:
    if media == JSON:
        return {"schema": {"type": "object"}}
    if media.startswith("text/"):
        return {"schema": {"type": "string"}}
    return {"schema": {"type": "string", "format": "binary", "contentMediaType": media}}


# A report's file. Generated clients read the first media type they know (openapi-python-client:
# text/*), so text comes first and JSON last: no format is then parsed as JSON; the bytes of
# any are in the raw response (`sync_detailed(...).content`).
_RESULT_MEDIA = {
    media: _file(media)
    for media in sorted(
        {fmt.media_type.partition(";")[0] for fmt in FORMATS.values()},
        key=lambda m: (not m.startswith("text/"), m == JSON),
    )
}
# OpenAPI 3.1 has the `schema` of an event stream describe one event (3.2 calls it
# `itemSchema`); the string alternative is the whole stream, as a client reads the body.
_SSE = {
    "text/event-stream": {
        "schema": {
            "anyOf": [{"$ref": "#/components/schemas/JobStreamEvent"}, {"type": "string"}],
            "description": "Events until the job's final state; the stream then ends.",
        }
    }
}

# What each route answers and honours, by (METHOD, path template).
ROUTE_NOTES: Mapping[tuple[str, str], Notes] = {
    ("GET", "/healthz"): Notes(replies={200: Reply(schemas.Health)}),
    ("GET", "/readyz"): Notes(replies={200: Reply(schemas.Health)}),
    ("GET", "/v1/payments"): _listing(schemas.PaymentList),
    ("POST", "/v1/payments"): Notes(
        body=Body("PaymentCreate", PaymentCreate.model_json_schema(), (JSON,)),
        replies={201: _created(schemas.Payment, _PAYMENT_LINKS)},
    ),
    ("GET", PAYMENT): _PAYMENT_READ,
    ("HEAD", PAYMENT): _PAYMENT_READ,
    ("PATCH", PAYMENT): Notes(
        if_match="required",
        problems=("state-conflict", "unsupported-media-type"),
        body=Body("PaymentUpdate", PaymentUpdate.model_json_schema(), PATCH_MEDIA_TYPES),
        replies={200: _resource(schemas.Payment, _PAYMENT_LINKS)},
    ),
    ("POST", "/v1/ledger-accounts"): Notes(
        replies={
            201: _created(
                schemas.LedgerAccount,
                {
                    "GetLedgerAccount": _by_id(
                        "GET",
                        "/v1/ledger-accounts/{ledger_account_id}",
                        "ledger_account_id",
                        "Read its balance.",
                    )
                },
            )
        }
    ),
    ("GET", "/v1/ledger-accounts/{ledger_account_id}"): _LEDGER_READ,
    # A `from` or `to` naming no ledger account of this account is a 404.
    ("POST", "/v1/transfers"): Notes(
        problems=("not-found", "insufficient-funds", "balance-limit-exceeded"),
        replies={
            201: Reply(
                schemas.Transfer,
                headers={"Location": True},
                links={
                    "GetTransfer": _by_id(
                        "GET", "/v1/transfers/{transfer_id}", "transfer_id", "Read it again."
                    )
                },
            )
        },
    ),
    ("GET", "/v1/transfers/{transfer_id}"): Notes(replies={200: Reply(schemas.Transfer)}),
    ("POST", "/v1/documents"): Notes(replies={201: _created(schemas.Document, _DOCUMENT_LINKS)}),
    ("GET", DOCUMENT): _DOCUMENT_READ,
    ("HEAD", DOCUMENT): _DOCUMENT_READ,
    # PUT takes If-Match to replace, or If-None-Match: * to create; one of them is required.
    ("PUT", DOCUMENT): Notes(
        if_match="optional",
        if_none_match=True,
        problems=("precondition-required",),
        replies={
            200: _resource(schemas.Document, _DOCUMENT_LINKS),
            201: Reply(
                schemas.Document,
                headers=_CREATED,
                links=_DOCUMENT_LINKS,
                description="Created at this id (`If-None-Match: *`).",
            ),
        },
    ),
    ("PATCH", DOCUMENT): Notes(
        if_match="required",
        problems=("unsupported-media-type",),
        body=Body("DocumentPatch", PATCH_SCHEMA, (MERGE_PATCH,)),
        replies={200: _resource(schemas.Document, _DOCUMENT_LINKS)},
    ),
    ("DELETE", DOCUMENT): Notes(if_match="required"),
    ("POST", "/v1/reports"): Notes(
        problems=("quota-exceeded",),
        replies={
            202: Reply(
                schemas.Job,
                headers={**_JOB_HEADERS, "Location": True},
                links=_JOB_LINKS,
                description="Accepted: the job that builds the report; follow `Location`.",
            )
        },
    ),
    ("GET", "/v1/jobs"): _listing(schemas.JobList),
    ("GET", JOB): _JOB_READ,
    ("HEAD", JOB): _JOB_READ,
    ("POST", f"{JOB}/cancel"): Notes(
        problems=("state-conflict",),
        replies={200: Reply(schemas.Job, headers=_JOB_HEADERS, links=_JOB_LINKS)},
    ),
    ("GET", f"{JOB}/result"): Notes(
        replies={
            200: Reply(
                media=_RESULT_MEDIA,
                headers={"ETag": True, "Content-Disposition": True},
                description="The file, in the format the report asked for.",
            )
        }
    ),
    ("GET", f"{JOB}/events"): Notes(
        problems=("bad-request", "quota-exceeded", "rate-limited"),
        replies={
            200: Reply(media=_SSE, description="Server-sent events of status and progress."),
            204: Reply(description="The job has finished: nothing more to stream."),
        },
    ),
    ("POST", "/v1/webhook-endpoints"): Notes(
        problems=("quota-exceeded",),
        replies={
            201: Reply(
                schemas.WebhookEndpointWithSecret,
                headers={"ETag": True, "Location": True},
                links=_ENDPOINT_LINKS,
            )
        },
    ),
    ("GET", "/v1/webhook-endpoints"): _listing(schemas.WebhookEndpointList),
    ("GET", "/v1/api-keys"): _listing(schemas.ApiKeyList),
    ("POST", "/v1/api-keys"): Notes(
        replies={
            201: Reply(
                schemas.ApiKeyWithKey,
                headers={"Cache-Control": True},
                description="Created: `key` is shown here only (sent `no-store`).",
            )
        }
    ),
    ("DELETE", "/v1/api-keys/{key_id}"): Notes(problems=("not-found",)),
    ("POST", "/v1/portal-sessions"): Notes(
        problems=("forbidden",),
        replies={
            201: Reply(
                schemas.PortalSessionWithLink,
                headers={"Location": True, "Cache-Control": True},
                description="Created: `url` and `token` are shown here only (sent `no-store`).",
            )
        },
    ),
    ("GET", "/v1/portal-sessions/{session_id}"): Notes(
        problems=("forbidden",), replies={200: Reply(schemas.PortalSession)}
    ),
    ("DELETE", "/v1/portal-sessions/{session_id}"): Notes(problems=("forbidden",)),
    ("GET", ENDPOINT): Notes(if_none_match=True, replies={200: _ENDPOINT_REPLY}),
    ("PATCH", ENDPOINT): Notes(if_match="optional", replies={200: _ENDPOINT_REPLY}),
    ("DELETE", ENDPOINT): Notes(if_match="optional"),
    ("POST", f"{ENDPOINT}/rotate-secret"): Notes(replies={200: _SECRET_REPLY}),
    ("POST", f"{ENDPOINT}/test"): Notes(
        problems=("state-conflict", "rate-limited"),
        replies={
            202: Reply(
                schemas.Event,
                links={
                    "GetEvent": _by_id("GET", "/v1/events/{event_id}", "event_id", "The ping."),
                    "PingDeliveries": _by_id("GET", "/v1/deliveries", "event_id", "Its delivery."),
                },
            )
        },
    ),
    ("GET", f"{ENDPOINT}/head"): Notes(replies={200: Reply(schemas.EndpointHead)}),
    ("POST", f"{ENDPOINT}/recover"): Notes(
        problems=("state-conflict",), replies={202: Reply(schemas.Recovery)}
    ),
    ("GET", "/v1/events"): Notes(
        problems=("event-cursor-invalid",), replies={200: Reply(schemas.EventList)}
    ),
    ("GET", "/v1/events/{event_id}"): Notes(replies={200: Reply(schemas.Event)}),
    ("POST", "/v1/events/{event_id}/expunge"): Notes(replies={200: Reply(schemas.Event)}),
    ("GET", "/v1/event-types"): _listing(schemas.EventTypeList),
    ("GET", "/v1/deliveries"): _listing(schemas.DeliveryList),
    ("GET", "/v1/deliveries/{delivery_id}"): Notes(
        replies={200: Reply(schemas.DeliveryWithAttempts)}
    ),
    ("POST", "/v1/deliveries/{delivery_id}/retry"): Notes(
        problems=("state-conflict", "event-expunged"),
        replies={
            202: Reply(
                schemas.Delivery,
                links={
                    "GetDelivery": _by_id(
                        "GET", "/v1/deliveries/{delivery_id}", "delivery_id", "Its attempts."
                    )
                },
            )
        },
    ),
}


def _display(name: str) -> str:
    return "-".join(part.capitalize() for part in name.split("-"))


def _request_header(name: str, *, required: bool) -> dict[str, Any]:
    return {"name": _display(name), "in": "header", "required": required, **_REQUEST_HEADERS[name]}


def _response_headers(names: Mapping[str, bool]) -> dict[str, Any]:
    return {name: {**_RESPONSE_HEADERS[name], "required": always} for name, always in names.items()}


def _problem_response(status: int, slugs: Iterable[str]) -> dict[str, Any]:
    listed = sorted(set(slugs))
    names = ", ".join(f"`{s}`" for s in listed)
    titles = "; ".join(CATALOGUE[s].title for s in listed if s in CATALOGUE)
    response: dict[str, Any] = {
        "description": f"{titles} (problem type {names}).",
        "content": {MEDIA_TYPE: {"schema": {"$ref": PROBLEM_REF}}},
        "x-problems": listed,
    }
    if status in (409, 429, 503):
        response["headers"] = _response_headers({"Retry-After": False})
    return response


def _problems_of(path: str, operation: dict[str, Any], notes: Notes) -> dict[int, set[str]]:
    """The problem types an operation can answer with, by status."""
    problems: dict[int, set[str]] = {500: {"internal-error"}}

    def add(slug: str) -> None:
        problems.setdefault(CATALOGUE[slug].status, set()).add(slug)

    if path.startswith("/v1/"):
        add("unauthorized")
        add("rate-limited")  # past the account's request rate, or failed bearer checks
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
            "idempotency-response-unavailable",
            "quota-exceeded",  # a new key past the account's bytes of stored answers
        ):
            add(slug)
        if notes.idempotency == "required":
            add("idempotency-key-missing")
    if notes.if_match or (notes.if_none_match and operation.get("requestBody")):
        add("precondition-failed")
    if notes.if_match:
        add("precondition-invalid")
    if notes.if_match == "required":
        add("precondition-required")
    for slug in notes.problems:
        add(slug)
    for status, response in operation.get("responses", {}).items():
        for slug in response.get("x-problems", ()):
            problems.setdefault(int(status), set()).add(slug)
    return problems


def _declared(method: str, path: str, operation: dict[str, Any]) -> Notes:
    """What a route declares itself (headers as FastAPI `Header` or `openapi_extra` params), and
    the `Idempotency-Key` the middleware honours on every POST/PATCH under `/v1/` unless the
    route's policy (`ustun.idempotency.idempotency`) is `off`."""
    names = {
        p["name"].lower(): p.get("required", False)
        for p in operation.get("parameters", [])
        if p.get("in") == "header"
    }

    def need(name: str) -> Need | None:
        if name not in names:
            return None
        return "required" if names[name] else "optional"

    policy = operation.get(MARKER) or need("idempotency-key")
    if policy is None and method in ("post", "patch") and path.startswith("/v1/"):
        policy = "optional"
    idempotency: Need | None = policy if policy in ("required", "optional") else None
    return Notes(idempotency, need("if-match"), "if-none-match" in names)


def _merge(a: Notes, b: Notes) -> Notes:
    return Notes(
        a.idempotency or b.idempotency,
        a.if_match or b.if_match,
        a.if_none_match or b.if_none_match,
        a.problems + b.problems,
        {**a.replies, **b.replies},
        a.body or b.body,
    )


def _absent_is_not_null(param: dict[str, Any]) -> None:
    """An optional query or header parameter is absent, never `null` (FastAPI says `T | null`,
    which a generator sends as an empty value that the route refuses)."""
    schema = param.get("schema", {})
    variants = [v for v in schema.get("anyOf", ()) if v != {"type": "null"}]
    if len(variants) == 1 and len(schema["anyOf"]) == 2:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        param["schema"] = {**variants[0], **rest}


def _reply_response(
    method: str, status: int, reply: Reply, fastapi: dict[str, Any]
) -> dict[str, Any]:
    """The response object of a `Reply` (FastAPI's own description kept when it has none)."""
    fallback = fastapi.get("description", HTTPStatus(status).phrase)
    out: dict[str, Any] = {"description": reply.description or fallback}
    if method != "head":
        if reply.model is not None:
            ref = {"$ref": f"#/components/schemas/{reply.model.__name__}"}
            out["content"] = {JSON: {"schema": ref}}
        elif reply.media:
            out["content"] = dict(reply.media)
    if reply.headers:
        out["headers"] = _response_headers(reply.headers)
    return out


def _complete_operation(path: str, method: str, operation: dict[str, Any], extra: Notes) -> None:
    notes = _merge(_declared(method, path, operation), extra)
    params: list[dict[str, Any]] = operation.setdefault("parameters", [])
    for param in params:
        name = param["name"].lower()
        if param.get("in") == "header" and name in _REQUEST_HEADERS:
            param.update(_REQUEST_HEADERS[name], name=_display(name))
        _absent_is_not_null(param)
    present = {p["name"].lower() for p in params if p.get("in") == "header"}
    if notes.idempotency and "idempotency-key" not in present:
        params.append(_request_header("idempotency-key", required=notes.idempotency == "required"))
    if notes.if_match and "if-match" not in present:
        params.append(_request_header("if-match", required=notes.if_match == "required"))
    if notes.if_none_match and "if-none-match" not in present:
        params.append(_request_header("if-none-match", required=False))
    if notes.body is not None:
        ref = {"$ref": f"#/components/schemas/{notes.body.name}"}
        operation["requestBody"] = {
            "required": True,
            "content": {media: {"schema": ref} for media in notes.body.media_types},
        }
    if notes.if_none_match and operation.get("requestBody"):
        for param in params:
            if param["name"].lower() == "if-none-match":
                param.update(_CREATE_ONLY)
    if not params:
        del operation["parameters"]

    responses: dict[str, Any] = operation.setdefault("responses", {})
    for status, reply in notes.replies.items():
        current = responses.get(str(status), {})
        responses[str(status)] = _reply_response(method, status, reply, current)
    for code, slugs in _problems_of(path, operation, notes).items():
        responses[str(code)] = _problem_response(code, slugs)
    ok = responses.get("200", {})
    if notes.if_none_match and method in ("get", "head"):
        # RFC 9110 §15.4.5: a 304 carries the validators and caching headers the 200 would.
        responses["304"] = {
            "description": "Not Modified: your copy (If-None-Match) is current.",
            "headers": copy.deepcopy(ok.get("headers", _response_headers({"ETag": True}))),
        }
    for key, response in responses.items():
        if not key.startswith(("2", "3")):
            continue
        headers = response.setdefault("headers", {})
        if path.startswith("/v1/"):
            headers.update(_response_headers({"Cache-Control": False}))
        if notes.idempotency and key.startswith("2"):
            headers.update(_response_headers({"Idempotent-Replayed": False}))
        if not headers:
            del response["headers"]
    if path.startswith("/v1/"):
        operation["security"] = [{SECURITY_SCHEME: []}]


def _link_objects(doc: dict[str, Any], notes: Mapping[tuple[str, str], Notes]) -> None:
    """Turn each reply's `Link`s into OpenAPI link objects, by the target's operationId (a HEAD
    answer has no body to take an id from)."""
    paths = doc.get("paths", {})
    for (method, path), note in notes.items():
        operation = paths.get(path, {}).get(method.lower())
        if operation is None or method == "HEAD":
            continue
        for status, reply in note.replies.items():
            if reply.links:
                operation["responses"][str(status)]["links"] = {
                    name: {
                        "operationId": paths[link.path][link.method.lower()]["operationId"],
                        "parameters": dict(link.parameters),
                        "description": link.description,
                    }
                    for name, link in reply.links.items()
                }


def _component_schemas(notes: Mapping[tuple[str, str], Notes]) -> dict[str, Any]:
    """The JSON Schemas of every reply model and hand-read body, by component name."""
    models = {r.model for n in notes.values() for r in n.replies.values() if r.model is not None}
    models.add(schemas.JobStreamEvent)
    _, top = models_json_schema(
        [(m, "serialization") for m in sorted(models, key=lambda m: m.__name__)],
        ref_template="#/components/schemas/{model}",
    )
    found: dict[str, Any] = top.get("$defs", {})
    for note in notes.values():
        if note.body is not None:
            found[note.body.name] = dict(note.body.schema)
    return found


def _problem_schema() -> dict[str, Any]:
    """The Problem schema, with the catalogue of problem types this server uses."""
    catalogue = "\n".join(f"- `{p.slug}` ({p.status}): {p.title}." for p in CATALOGUE.values())
    return {**PROBLEM_SCHEMA, "description": f"{PROBLEM_SCHEMA['description']}\n\n{catalogue}"} | {
        "x-problem-types": {
            p.slug: {"status": p.status, "title": p.title, "description": p.description}
            for p in CATALOGUE.values()
        }
    }


def _add_schemas(components: dict[str, Any], found: Mapping[str, Any]) -> None:
    """Add named schemas; two different ones under one name is a bug, never a silent overwrite."""
    for name, schema in found.items():
        if components.setdefault(name, schema) != schema:
            raise ValueError(f"two different schemas are both named {name!r}")


def complete(
    schema: Mapping[str, Any],
    events: Sequence[EventType],
    notes: Mapping[tuple[str, str], Notes],
) -> dict[str, Any]:
    """A completed copy of FastAPI's `schema` (see the module docstring)."""
    doc = copy.deepcopy(dict(schema))
    components = doc.setdefault("components", {})
    schemas_ = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas_.pop(unused, None)
    schemas_["Problem"] = _problem_schema()
    _add_schemas(schemas_, _component_schemas(notes))
    components["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `ustun keys create`: `Authorization: Bearer <key>`. "
            "A consumer portal link's token (`ptl_…`, `POST /v1/portal-sessions`) is accepted "
            "the same way, as its account, on the webhook endpoint, delivery and event routes "
            "only (403 `forbidden` elsewhere).",
        }
    }
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            extra = notes.get((method.upper(), path), Notes())
            _complete_operation(path, method, operation, extra)
    _link_objects(doc, notes)
    if events:
        doc["webhooks"] = event_docs.openapi_webhooks(events)
        _add_schemas(schemas_, event_docs.schemas(events))
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
