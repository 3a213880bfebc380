"""An endpoint's fields as a caller sends them, checked before anything is written: the body of
the service's `POST /v1/webhook-endpoints` (`EndpointIn`) and `PATCH …/{id}` (`EndpointPatch`),
the dashboard's form, and the `endpoints.create(account, url, events, **options)` of Django and
Flask, so that each refuses the same input with the same 422 `validation-error` (`refused`).

The field types they are made of (`Text`, `INTEGRAL_FLOAT`, `EventPattern`) live here with them,
below the service, which uses them for its other bodies too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ustun.defaults import DEFAULT_ENDPOINT_MAX_IN_FLIGHT
from ustun.errors import ProblemError
from ustun.webhooks import endpoint_auth, filters, operations, signing
from ustun.webhooks.endpoints import MAX_RATE_LIMIT, MIN_RATE_LIMIT, UNORDERED, Ordering
from ustun.webhooks.patterns import PATTERN, is_pattern


def storable(value: str) -> str:
    """`value` if it is valid Unicode without NUL; else a `ValueError` saying what is wrong.

    PostgreSQL's `text` refuses the NUL character, and no database can store a lone UTF-16
    surrogate (JSON allows `"\\udc00"`): both are refused at the edge, a 422 and not a 500."""
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


# A text field every backend can store.
Text = Annotated[str, AfterValidator(storable)]

# Every integer up to 2**53 in magnitude is exact as an IEEE 754 double, as JSON numbers are read.
_EXACT = 2**53


def _integral(value: object) -> object:
    """`100.0` as `100`, as JSON Schema counts it an integer; only where a double is exact."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    return value


# Put last in `Annotated[StrictInt, Field(...), INTEGRAL_FLOAT]`: the schema stays `integer` with
# its bounds, `100.0` passes, and `100.5`, `"100"` and `true` are still refused.
INTEGRAL_FLOAT = BeforeValidator(_integral)

# What `ustun.webhooks.patterns.is_pattern` accepts (the models validate with it; this only
# states it), so a generated client or fuzzer never offers `""`.
EventPattern = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "pattern": PATTERN.pattern,
            "description": "An event type (`payment.succeeded`), a prefix and `.*` "
            "(`payment.*`), or `*` for every type.",
        }
    ),
]

ORDERING = (
    "`unordered`: up to `max_in_flight` deliveries at once; `fifo`: one at a time, in the commit "
    "order of the events (a dead delivery no longer holds the rest back)."
)
Events = Annotated[list[EventPattern], Field(min_length=1, max_length=100)]
InFlight = Annotated[StrictInt, Field(ge=1, le=256), INTEGRAL_FLOAT]
RATE_LIMIT = (
    f"Sends per second across all workers, {MIN_RATE_LIMIT:g} (one per {1 / MIN_RATE_LIMIT:g} s) "
    f"to {MAX_RATE_LIMIT:g}; null: no limit."
)
RateLimit = Annotated[float, Field(ge=MIN_RATE_LIMIT, le=MAX_RATE_LIMIT, allow_inf_nan=False)]
Kind = Literal["http", "rabbitmq", "nats"]
Exchange = Annotated[
    Text | None,
    Field(
        default=None,
        max_length=255,
        description="`rabbitmq` only: the exchange (declared by you) events are published to, "
        "with the event type as routing key; not one of the broker's own (`amq.…`).",
    ),
]
Subject = Annotated[
    Text | None,
    Field(
        default=None,
        max_length=255,
        description="`nats` only: the JetStream subject events are published to (a stream of "
        "yours must take it); no wildcards, and not the server's own (`$…`, `_INBOX.…`).",
    ),
]


FILTER = (
    "A payload filter: the endpoint gets only the events whose `data` passes it (null: every "
    'event its `events` select). An object of `"dotted.path": condition` pairs that must all '
    "hold; a condition is a value to equal or an object of operators `$eq`, `$ne`, `$gt`, `$gte`, "
    "`$lt`, `$lte`, `$in`, `$nin`, `$exists`; `$and`, `$or` (lists of filters) and `$not` (a "
    f"filter) at a filter's top. At most {filters.MAX_DEPTH} deep, {filters.MAX_CONDITIONS} "
    f"conditions, {filters.MAX_SIZE} bytes as JSON, {filters.MAX_IN} values in an `$in`. "
    'Example: `{"amount": {"$gte": 10000}, "currency": {"$in": ["EUR", "USD"]}}`.'
)
PayloadFilter = Annotated[dict[str, Any] | None, Field(default=None, description=FILTER)]


def _check_filter(given: dict[str, Any] | None) -> dict[str, Any] | None:
    """A payload filter `filters.parse` accepts; else a `filter` error whose message starts with
    the position it refuses (`filter.$and[1].amount.$gt: …`)."""
    if given is not None:
        try:
            filters.parse(given)
        except filters.FilterError as exc:
            raise PydanticCustomError(
                "filter", "{message}", {"message": str(exc), "position": exc.position}
            ) from None
    return given


class MtlsIn(BaseModel):
    """A client certificate the endpoint's receiver requires (mutual TLS)."""

    model_config = ConfigDict(extra="forbid")

    certificate: Text = Field(
        max_length=endpoint_auth.MAX_CERTIFICATE,
        description="The client certificate chain, PEM, leaf first.",
    )
    private_key: Text = Field(
        max_length=endpoint_auth.MAX_CERTIFICATE,
        description="The leaf's private key, PEM, without a passphrase: kept encrypted, never "
        "shown.",
    )
    ca_bundle: Text | None = Field(
        default=None,
        max_length=endpoint_auth.MAX_CA_BUNDLE,
        description="Authorities trusted for the receiver's certificate (PEM), in place of the "
        "system's; null: the system's.",
    )

    @model_validator(mode="after")
    def _pair(self) -> MtlsIn:
        try:
            endpoint_auth.client_certificate(self.certificate, self.private_key, self.ca_bundle)
        except ValueError as exc:
            raise PydanticCustomError("mtls", "{message}", {"message": str(exc)}) from None
        return self


OAuth2Text = Annotated[Text, Field(min_length=1, max_length=endpoint_auth.MAX_OAUTH2_FIELD)]


class OAuth2In(BaseModel):
    """OAuth2 client credentials (RFC 6749 §4.4): each delivery carries a bearer token."""

    model_config = ConfigDict(extra="forbid")

    token_url: Text = Field(
        max_length=2048,
        description="The token endpoint: https, and no private address (as endpoint URLs).",
    )
    client_id: OAuth2Text
    client_secret: OAuth2Text = Field(description="Kept encrypted, never shown.")
    scope: OAuth2Text | None = None


MTLS = "A client certificate every request to this endpoint presents (mutual TLS); null: none."
OAUTH2 = "OAuth2 client credentials: a bearer token on every request; null: none."


def _check_patterns(patterns: list[str] | None) -> list[str] | None:
    bad = [p for p in patterns or () if not is_pattern(p)]
    if bad:
        raise ValueError(f"not an event type or wildcard (`payment.*`, `*`): {bad[0]!r}")
    return patterns


def _check_destination(kind: str, given: dict[str, object]) -> None:
    """A broker kind needs its exchange or subject; no kind takes another's."""
    wanted = operations.DESTINATION_FIELD.get(kind)
    for name, value in given.items():
        if name == wanted and value is None:
            raise ValueError(f"a {kind} endpoint needs `{name}`")
        if name != wanted and value is not None:
            raise ValueError(f"`{name}` is only for a {_kind_of(name)} endpoint")


def _kind_of(field: str) -> str:
    return next(k for k, f in operations.DESTINATION_FIELD.items() if f == field)


class EndpointIn(BaseModel):
    """The body of `POST /v1/webhook-endpoints`."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind = Field(
        default="http",
        description="`http`: events are POSTed to `url`; `rabbitmq` (`amqp://`, `amqps://`) or "
        "`nats` (`nats://`, `tls://`, JetStream): published to the broker at `url`, which may "
        "carry credentials: it is kept encrypted and shown without them. A broker URL takes no "
        "query options but RabbitMQ's `heartbeat` and `name`.",
    )
    url: Text = Field(max_length=2048)
    exchange: Exchange = None
    subject: Subject = None
    events: Events = Field(default_factory=lambda: ["*"])
    description: Text = Field(default="", max_length=500)
    payload: Literal["full", "thin"] = "full"
    rate_limit: RateLimit | None = Field(default=None, description=RATE_LIMIT)
    max_in_flight: InFlight = DEFAULT_ENDPOINT_MAX_IN_FLIGHT
    signature: signing.Scheme = Field(
        default=signing.HMAC_SHA256,
        description="`hmac-sha256`: `v1` signatures under the `secret` in the answer; "
        "`ed25519`: `v1a` signatures, verified with the `public_key` in the answer.",
    )
    ordering: Ordering = Field(default=UNORDERED, description=ORDERING)
    filter: PayloadFilter = None
    mtls: MtlsIn | None = Field(default=None, description=MTLS)
    oauth2: OAuth2In | None = Field(default=None, description=OAUTH2)

    _patterns = field_validator("events")(_check_patterns)
    _filter = field_validator("filter")(_check_filter)

    @model_validator(mode="after")
    def _destination(self) -> EndpointIn:
        _check_destination(self.kind, {"exchange": self.exchange, "subject": self.subject})
        return self


class EndpointPatch(BaseModel):
    """The body of `PATCH /v1/webhook-endpoints/{id}`: only the fields to change."""

    model_config = ConfigDict(extra="forbid")

    url: Text | None = Field(default=None, max_length=2048)
    exchange: Exchange = None
    subject: Subject = None
    events: Events | None = None
    description: Text | None = Field(default=None, max_length=500)
    payload: Literal["full", "thin"] | None = None
    rate_limit: RateLimit | None = Field(default=None, description=RATE_LIMIT)
    max_in_flight: InFlight | None = None
    ordering: Ordering | None = Field(default=None, description=ORDERING)
    enabled: bool | None = None
    filter: PayloadFilter = None
    mtls: MtlsIn | None = Field(default=None, description=MTLS)
    oauth2: OAuth2In | None = Field(default=None, description=OAUTH2)

    _patterns = field_validator("events")(_check_patterns)
    _filter = field_validator("filter")(_check_filter)


def field_message(err: Mapping[str, Any]) -> str:
    """A validation error's message, without the `Value error, ` pydantic puts before what a
    validator of ours says."""
    return str(err.get("msg", "")).removeprefix("Value error, ")


def refused(exc: ValidationError) -> ProblemError:
    """422 `validation-error` naming each refused field as the service names its body's
    (`body.events`), as `operations.checked_endpoint` names a refused URL."""
    errors = [
        {
            "field": ".".join(str(part) for part in ("body", *err["loc"])),
            "message": field_message(err),
            "type": err["type"],
        }
        for err in exc.errors()
    ]
    fields = ", ".join(e["field"] for e in errors)
    return ProblemError("validation-error", f"Invalid value in {fields}.", errors=errors)


def endpoint_fields(
    url: str, event_types: Sequence[str], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The fields of a new endpoint at `url` for `event_types` with `options` (the body's other
    fields) as `EndpointIn` checks them, for `operations.checked_endpoint`; a refused one (an
    unknown option, a wrong type, a bad pattern) raises `refused`'s 422."""
    if "events" in options:
        # As Python refuses a keyword given twice: the event types are `event_types`.
        raise TypeError("endpoint_fields() got the event types twice: pass them as event_types")
    try:
        body = EndpointIn.model_validate({**options, "url": url, "events": list(event_types)})
    except ValidationError as exc:
        raise refused(exc) from None
    return body.model_dump(exclude_none=True)
