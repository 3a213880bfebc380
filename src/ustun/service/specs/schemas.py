"""The response shapes of the API as models, for the OpenAPI document (`service/specs/openapi.py`).

Handlers render their JSON themselves (`render()` beside each route); these models only
describe it, so that generated clients get typed objects. Schemathesis checks every response
the service sends against them (`tests/e2e/test_schemathesis.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from ustun.http.problem import MEDIA_TYPE
from ustun.jobs.states import JobStatusValue
from ustun.service.plumbing.bodies import EventPattern
from ustun.service.specs.event_types import CATALOGUE
from ustun.webhooks.endpoints import MAX_RATE_LIMIT, MIN_RATE_LIMIT
from ustun.webhooks.states import StatusValue

PROBLEM_REF = "#/components/schemas/Problem"
# Extra members may appear in a later version: clients must ignore what they do not know.
_OPEN = ConfigDict(extra="allow")

Timestamp = Annotated[datetime, Field(description="RFC 3339, UTC.")]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code.")]
MinorUnits = Annotated[int, Field(description="Integer, in minor units of `currency`.")]
ProblemOrNull = Annotated[
    dict[str, Any] | None,
    WithJsonSchema(
        {"anyOf": [{"$ref": PROBLEM_REF}, {"type": "null"}], "description": f"A {MEDIA_TYPE}."}
    ),
]

# An event's `data`: the object of its type, whose schema (by title) is in the catalogue.
EventData = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "description": "The object the event is about, in full: the `schema` of its type in "
            "`GET /v1/event-types` (a `thin` endpoint's deliveries carry only its `id` and "
            "`url`; the log keeps it whole).",
            "oneOf": [
                {"$ref": f"#/components/schemas/{title}"}
                for title in dict.fromkeys(t.schema["title"] for t in CATALOGUE)
            ],
        }
    ),
]


def _id(prefix: str) -> Any:
    return Field(pattern=f"^{prefix}_", description=f"`{prefix}_…`")


class Payment(BaseModel):
    """A payment: `pending` until it succeeds, fails or is cancelled."""

    model_config = _OPEN

    id: str = _id("pay")
    object: Literal["payment"]
    amount: MinorUnits
    currency: Currency
    order_id: int | None
    description: str | None
    status: Literal["pending", "succeeded", "failed", "cancelled"]
    created_at: Timestamp
    updated_at: Timestamp


class LedgerAccount(BaseModel):
    """A balance in one currency that transfers move money between."""

    model_config = _OPEN

    id: str = _id("la")
    object: Literal["ledger_account"]
    currency: Currency
    balance: MinorUnits
    created_at: Timestamp


class Transfer(BaseModel):
    """Money moved from one ledger account to another, in one transaction."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str = _id("tr")
    object: Literal["transfer"]
    source: str = Field(alias="from", description="The ledger account debited.")
    target: str = Field(alias="to", description="The ledger account credited.")
    amount: MinorUnits
    currency: Currency
    created_at: Timestamp


class Document(BaseModel):
    """A document; `version` (and the ETag) changes on every write."""

    model_config = _OPEN

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    object: Literal["document"]
    title: str
    body: str
    version: int
    created_at: Timestamp
    updated_at: Timestamp


class Job(BaseModel):
    """An asynchronous job; poll it (honouring `Retry-After`) or follow its events."""

    model_config = _OPEN

    id: str = _id("job")
    object: Literal["job"]
    kind: str
    status: JobStatusValue
    progress: int = Field(ge=0, le=100)
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None
    result_url: str | None = Field(description="Where the result is, once the job is done.")
    error: ProblemOrNull
    cancel_requested: bool


class JobStreamEvent(BaseModel):
    """One server-sent event of `GET /v1/jobs/{id}/events`: `id` is the job's version."""

    model_config = _OPEN

    id: str = Field(pattern="^[0-9]+$", description="Send it back as `Last-Event-ID`.")
    event: Literal["status", "progress"]
    data: str = Field(
        description="JSON: `{id, status, progress, at}`.",
        json_schema_extra={"contentMediaType": "application/json"},
    )


class EndpointCircuit(BaseModel):
    """An endpoint's circuit breaker: after consecutive failed attempts it holds the endpoint's
    deliveries back (`open`), then lets one through as a probe (`half_open`)."""

    model_config = _OPEN

    state: Literal["closed", "open", "half_open"] = Field(
        description="`closed`: deliveries flow; `open`: none is sent until `probe_at`; "
        "`half_open`: one delivery at a time probes the endpoint, its success closes the circuit."
    )
    failures: int = Field(ge=0, description="Consecutive failed attempts; a success resets it.")
    probe_at: Timestamp | None = Field(
        description="While not closed: when the probe may go (the end of the cool-down)."
    )


class EndpointMtls(BaseModel):
    """The client certificate an endpoint presents (its key is never shown)."""

    model_config = _OPEN

    subject: str = Field(description="The leaf certificate's subject (RFC 4514).")
    not_after: Timestamp = Field(description="When the leaf certificate expires.")
    ca_bundle: bool = Field(description="Whether the endpoint trusts its own authorities.")


class EndpointOAuth2(BaseModel):
    """An endpoint's OAuth2 client credentials (the client secret is never shown)."""

    model_config = _OPEN

    token_url: str
    client_id: str
    scope: str | None


class WebhookEndpoint(BaseModel):
    """A URL or broker destination subscribed to event types (never with its secret)."""

    model_config = _OPEN

    id: str = _id("we")
    object: Literal["webhook_endpoint"]
    kind: Literal["http", "rabbitmq", "nats"] = Field(
        description="`http` (POST to `url`), or a broker that events are published to."
    )
    url: str = Field(
        description="Where events go; a broker's URL without its credentials (kept encrypted)."
    )
    exchange: str | None = Field(description="A `rabbitmq` endpoint's exchange; else null.")
    subject: str | None = Field(description="A `nats` endpoint's JetStream subject; else null.")
    description: str
    events: list[EventPattern]
    filter: dict[str, Any] | None = Field(
        description="The payload filter the events' `data` must pass, as given; null: none."
    )
    payload: Literal["full", "thin"]
    enabled: bool
    disabled_reason: str | None
    circuit: EndpointCircuit
    mtls: EndpointMtls | None = Field(description="The client certificate it presents, or null.")
    oauth2: EndpointOAuth2 | None = Field(description="Its OAuth2 credentials, or null.")
    rate_limit: float | None = Field(
        ge=MIN_RATE_LIMIT,
        le=MAX_RATE_LIMIT,
        description=f"Sends per second across all workers ({MIN_RATE_LIMIT:g} to "
        f"{MAX_RATE_LIMIT:g}), or none.",
    )
    max_in_flight: int = Field(description="Deliveries in flight at once, across all workers.")
    ordering: Literal["unordered", "fifo"] = Field(
        description="`fifo`: one delivery at a time, in the commit order of the events."
    )
    signature: Literal["hmac-sha256", "ed25519"] = Field(
        description="`hmac-sha256`: `v1` signatures under a `whsec_` secret; `ed25519`: `v1a` "
        "signatures under a private key ustun keeps, verified with `public_key`."
    )
    public_key: str | None = Field(
        description="`whpk_…` of an `ed25519` endpoint (verify with it); null for HMAC."
    )
    created_at: Timestamp
    updated_at: Timestamp


class WebhookEndpointWithSecret(WebhookEndpoint):
    """An endpoint as created or rotated: the only answers that show an HMAC signing secret."""

    secret: str | None = Field(
        description="`whsec_…` of an `hmac-sha256` endpoint: keep it; it is never shown again. "
        "Null for `ed25519` (its private key is never shown; verify with `public_key`).",
    )


class ApiKey(BaseModel):
    """An API key of the account, by its prefix: never the key itself."""

    model_config = _OPEN

    id: str = _id("key")
    object: Literal["api_key"]
    prefix: str
    created_at: Timestamp
    last_used_at: Timestamp | None = Field(description="Updated at most once a minute.")
    revoked_at: Timestamp | None


class ApiKeyWithKey(ApiKey):
    """A key as created: the only answer that shows it."""

    key: str = Field(description="Send as `Authorization: Bearer <key>`; never shown again.")


class PortalSession(BaseModel):
    """A consumer portal session: one account's link, never its token."""

    model_config = _OPEN

    id: str = _id("ps")
    object: Literal["portal_session"]
    account: str = Field(description="The account's name.")
    event_types: list[str] | None = Field(
        description="The event types the link may subscribe to and sees; null: all."
    )
    created_at: Timestamp
    expires_at: Timestamp
    revoked_at: Timestamp | None
    created_by: str | None = Field(description="The operator key (`key_…`) that opened it.")


class PortalSessionWithLink(PortalSession):
    """A portal session as opened: the only answer that shows its link and token."""

    url: str = Field(
        description="`<USTUN_PUBLIC_URL>/portal/#token=<token>`: hand it to the account's people."
    )
    token: str = Field(description="`ptl_…`: the link's bearer token; never shown again.")


class Event(BaseModel):
    """An event of the log, as a receiver gets it (plus `object`)."""

    model_config = _OPEN

    id: str = _id("evt")
    object: Literal["event"]
    type: str
    created_at: Timestamp
    api_version: str
    data: EventData | None = Field(
        description="The object the event is about; null once its payload is expunged."
    )
    expunged_at: Timestamp | None = Field(
        default=None,
        description="When its payload was expunged (`USTUN_WEBHOOK_PAYLOAD_RETENTION`, or "
        "`POST /v1/events/{event_id}/expunge`); absent while it is kept.",
    )


class Delivery(BaseModel):
    """One event on its way to one endpoint; `next_attempt_at` is null once settled."""

    model_config = _OPEN

    id: str = _id("dlv")
    object: Literal["delivery"]
    endpoint_id: str
    event_id: str
    status: StatusValue
    attempt_count: int
    next_attempt_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp


class DeliveryAttempt(BaseModel):
    """One attempt: the status code (or the error), latency, the response's first 4 KiB."""

    model_config = _OPEN

    attempted_at: Timestamp
    status_code: int | None
    latency_ms: int | None
    response: str | None
    error: str | None


class DeliveryWithAttempts(Delivery):
    """A delivery with every attempt, oldest first."""

    attempts: list[DeliveryAttempt]


class EventTypeVersion(BaseModel):
    """One version of an event type's `data` schema (the first is 1)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    version: int = Field(ge=1)
    data_schema: dict[str, Any] = Field(alias="schema")


class EventType(BaseModel):
    """One event type of the catalogue, with the JSON Schema of its `data`."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str
    description: str
    data_schema: dict[str, Any] = Field(alias="schema", description="The current version's.")
    version: int = Field(ge=1, description="The current version's number.")
    versions: list[EventTypeVersion] = Field(description="Every version, oldest first.")
    example: dict[str, Any] | None = Field(description="An example `data`, or null.")
    deprecated: bool


class EndpointHead(BaseModel):
    """What a FIFO endpoint sends next, or waits on while that delivery waits for its retry."""

    model_config = _OPEN

    object: Literal["endpoint_head"]
    endpoint_id: str = _id("we")
    ordering: Literal["unordered", "fifo"]
    delivery: Delivery | None = Field(
        description="The endpoint's oldest undelivered delivery in the commit order of the "
        "events; null when nothing waits."
    )


class Recovery(BaseModel):
    """How many failed or dead deliveries `recover` queued again."""

    model_config = _OPEN

    object: Literal["recovery"]
    endpoint_id: str
    recovered: int


class Health(BaseModel):
    """A probe's answer."""

    model_config = _OPEN

    status: str


def page_of(item: type[BaseModel]) -> type[BaseModel]:
    """The list envelope of `item`: `{"data": [...], "next_cursor": …}`, named `<Item>List`."""
    name = f"{item.__name__}List"
    return create_model(
        name,
        __config__=ConfigDict(extra="allow", title=name),
        __doc__=f"A page of {name[:-4]} objects, newest first; pass `next_cursor` as `cursor`.",
        data=(list[item], ...),  # type: ignore[valid-type]
        next_cursor=(str | None, Field(description="Null on the last page.")),
    )


PaymentList = page_of(Payment)
JobList = page_of(Job)
WebhookEndpointList = page_of(WebhookEndpoint)
EventList = page_of(Event)
EventTypeList = page_of(EventType)
DeliveryList = page_of(Delivery)
ApiKeyList = page_of(ApiKey)
