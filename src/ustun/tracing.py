"""OpenTelemetry tracing (`pip install 'ustun[otel]'`), on only when the standard `OTEL_*`
variables say so: `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set, or
`OTEL_TRACES_EXPORTER` set to anything but `none`; `OTEL_SDK_DISABLED=true` turns it off.

Decided once, at import. Off, nothing from `opentelemetry` is imported and every hook here is
one check of the module-level `ENABLED`. On, the first span installs an SDK tracer provider
(a batch processor and the OTLP/HTTP exporter, or the console exporter for
`OTEL_TRACES_EXPORTER=console`; `service.name` from `OTEL_SERVICE_NAME`, else "ustun") unless
the app installed its own global provider, which ustun then uses.

The pillars call this module and it imports none of them. The trace context travels as a W3C
`traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header): stored with a job or an
event (`current_traceparent`), it parents the job's run and each delivery attempt (`parent=`);
an incoming request's is honoured (`server`), an outgoing request's set (`inject`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger("ustun.tracing")

Kind = Literal["internal", "server", "client", "producer", "consumer"]
Attributes = Mapping[str, str | bool | int | float]

TRACEPARENT = "traceparent"
# Where a WSGI framework leaves the matched route's template for `wsgi` to name the span after.
ROUTE = "ustun.route"
# The OpenTelemetry semantic conventions' attribute names (https://opentelemetry.io/docs/specs/semconv/).
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_FULL = "url.full"
ERROR_TYPE = "error.type"


def _decide(env: Mapping[str, str]) -> bool:
    """Whether the `OTEL_*` variables in `env` turn tracing on."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


ENABLED = _decide(os.environ)

_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()
_tracer: Tracer | None = None


def enabled() -> bool:
    """Whether tracing is on in this process."""
    return ENABLED


def _get_tracer() -> Tracer:
    global _tracer
    if _tracer is None:
        from opentelemetry import trace

        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(_provider())
        _tracer = trace.get_tracer("ustun")
    return _tracer


def _provider() -> Any:
    """ustun's own tracer provider: the standard variables' exporter behind a batch processor."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "ustun"}))
    provider = TracerProvider(resource=resource)
    exporter: SpanExporter
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing on: spans exported by %s", type(exporter).__name__)
    return provider


def _kind(kind: Kind) -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind[kind.upper()]


def _parented(traceparent: str | None) -> Context | None:
    """The context whose parent is the span `traceparent` names (None: the current one)."""
    if traceparent is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent})


def span(
    name: str,
    *,
    kind: Kind = "internal",
    parent: str | None = None,
    attributes: Attributes | None = None,
    current: bool = True,
) -> contextlib.AbstractContextManager[Span | None]:
    """A span around the block: a child of the current span, or of the span the stored
    `parent` traceparent names; current inside the block unless not `current` (for a block
    that may end in another context than it began). Off: a shared no-op that yields None."""
    if not ENABLED:
        return _OFF
    tracer, context = _get_tracer(), _parented(parent)
    if current:
        return tracer.start_as_current_span(
            name, context=context, kind=_kind(kind), attributes=attributes
        )
    return _ended(tracer.start_span(name, context=context, kind=_kind(kind), attributes=attributes))


@contextlib.contextmanager
def _ended(started: Span) -> Iterator[Span]:
    """End `started` with the block (an exception recorded), never making it current."""
    try:
        yield started
    except BaseException as exc:
        from opentelemetry.trace import Status, StatusCode

        started.record_exception(exc)
        started.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        started.end()


def server(
    method: str, headers: Iterable[tuple[bytes, bytes]]
) -> contextlib.AbstractContextManager[Span | None]:
    """The server span of an HTTP request (ASGI `headers`), a child of the incoming
    `traceparent` (any propagator the app configured, W3C by default). Inside the app's own
    server span (its OpenTelemetry instrumentation ran first) that span is joined instead.
    Name it once the route is known with `finish` (a joined span yields None: its owner names
    it)."""
    if not ENABLED:
        return _OFF
    return _server(method, {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers})


def wsgi_server(environ: Mapping[str, Any]) -> contextlib.AbstractContextManager[Span | None]:
    """`server` for a WSGI request (Django's `request.META` too)."""
    if not ENABLED:
        return _OFF
    carrier = {
        k[5:].lower().replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")
    }
    return _server(str(environ.get("REQUEST_METHOD", "")), carrier)


def _server(method: str, carrier: Mapping[str, str]) -> contextlib.AbstractContextManager[Any]:
    from opentelemetry import propagate, trace

    if trace.get_current_span().get_span_context().is_valid:
        return _OFF
    return _get_tracer().start_as_current_span(
        method,
        context=propagate.extract(carrier),
        kind=_kind("server"),
        attributes={HTTP_METHOD: method},
    )


def finish(
    current: Span | None, *, method: str, route: str | None, status: int | None = None
) -> None:
    """Name a server span after its route (`POST /v1/payments`) and record its status; a 5xx
    is an error (a 4xx is the client's, not the server's)."""
    if current is None:
        return
    if route is not None:
        current.update_name(f"{method} {route}")
        current.set_attribute(HTTP_ROUTE, route)
    if status is not None:
        current.set_attribute(HTTP_STATUS, status)
        if status >= 500:
            from opentelemetry.trace import Status, StatusCode

            current.set_attribute(ERROR_TYPE, str(status))
            current.set_status(Status(StatusCode.ERROR))


def annotate(attributes: Attributes) -> None:
    """Set attributes on the current span, if tracing is on and a span is current."""
    if not ENABLED:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(attributes)


def attempt_outcome(
    current: Span | None, *, ok: bool, status: int | None, error: str | None
) -> None:
    """Record an attempt's outcome on its span: the HTTP status if there was one; a failed
    attempt (not `ok`) marks the span an error, with the error or the status as its type."""
    if current is None:
        return
    if status is not None:
        current.set_attribute(HTTP_STATUS, status)
    if not ok:
        from opentelemetry.trace import Status, StatusCode

        current.set_attribute(ERROR_TYPE, error or str(status))
        current.set_status(Status(StatusCode.ERROR, error))


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span, to store with what it causes; None when
    tracing is off or no span is current."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (and `tracestate`) to outgoing `headers`."""
    if not ENABLED:
        return
    from opentelemetry import propagate

    propagate.inject(headers)


def flush(timeout_millis: int = 5_000) -> None:
    """Export the spans still buffered (before a short-lived process exits)."""
    if not ENABLED or _tracer is None:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush(timeout_millis)


async def asgi(app: Any, scope: Any, receive: Any, send: Any) -> None:
    """Run the ASGI `app` on an HTTP request inside its server span (`server`), named after
    the route the app matched, if it says (Starlette's `scope["route"]`)."""
    if not ENABLED or scope["type"] != "http":
        await app(scope, receive, send)
        return
    status: int | None = None

    async def observed(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    with server(scope["method"], scope["headers"]) as span:
        try:
            await app(scope, receive, observed)
        finally:
            route = getattr(scope.get("route"), "path", None)
            finish(span, method=scope["method"], route=route, status=status)


def wsgi(app: Any, environ: Any, start_response: Any) -> Iterable[bytes]:
    """Call the WSGI `app` inside the request's server span (`wsgi_server`), named after the
    route the app put in `environ[ROUTE]` (Flask's url rule, by `ustun.flask`), if any."""
    if not ENABLED:
        result: Iterable[bytes] = app(environ, start_response)
        return result
    status: int | None = None

    def observed(line: str, headers: Any, exc_info: Any = None) -> Any:
        nonlocal status
        status = int(line.split(" ", 1)[0])
        return start_response(line, headers, exc_info)

    with wsgi_server(environ) as span:
        try:
            result = app(environ, observed)
        finally:
            route = environ.get(ROUTE)
            finish(span, method=environ["REQUEST_METHOD"], route=route, status=status)
    return result
