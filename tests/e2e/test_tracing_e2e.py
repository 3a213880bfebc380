"""One trace from request to delivery: `ustun serve` exports its spans over OTLP/HTTP to a
receiver of the test's own, and a report request that arrives with a `traceparent` is followed
through its job's run, the `job.completed` event it emits and that event's delivery attempt to
a real local webhook receiver, on both databases."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from local_servers import Script, ThreadedServer
from support import FIRST_KEY, Server, wait_for

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Span:
    """One exported span, ids in hex as `traceparent` spells them."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, object]
    service: str

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(value: AnyValue) -> object:
    return getattr(value, value.WhichOneof("value") or "string_value")


class OtlpReceiver:
    """`POST /v1/traces` as an OpenTelemetry collector takes it (OTLP/HTTP, protobuf)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/traces", self.traces, methods=["POST"])])

    async def traces(self, request: Request) -> Response:
        assert request.headers["content-type"] == PROTOBUF
        export = ExportTraceServiceRequest.FromString(await request.body())
        found = []
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            span.name,
                            span.kind,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            {a.key: _value(a.value) for a in span.attributes},
                            str(resource.get("service.name")),
                        )
                    )
        with self._lock:
            self.spans.extend(found)
        body = ExportTraceServiceResponse().SerializeToString()
        return Response(body, media_type=PROTOBUF)

    def of_trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]


@pytest.fixture
def otlp() -> Iterator[tuple[OtlpReceiver, str]]:
    receiver = OtlpReceiver()
    with ThreadedServer(receiver.app) as server:
        yield receiver, server.base_url


def render(spans: list[Span], root_parent: str) -> str:
    """The trace as an indented tree: name, kind, duration and the attributes that say what."""
    kinds = {v: k.removeprefix("SPAN_KIND_").lower() for k, v in ProtoSpan.SpanKind.items()}
    children: dict[str, list[Span]] = {}
    for span in sorted(spans, key=lambda s: s.start_ns):
        children.setdefault(span.parent_id, []).append(span)
    lines = [f"(incoming traceparent: span {root_parent})"]

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            said = {
                k: v
                for k, v in span.attributes.items()
                if k in {"http.response.status_code", "ustun.idempotency.replayed"}
                or k.startswith("ustun.job.")
                or k == "ustun.event.type"
            }
            lines.append(
                f"{'  ' * depth}{span.name} [{kinds[span.kind]}] {span.ms:.2f} ms "
                f"span={span.span_id} parent={span.parent_id} {said or ''}".rstrip()
            )
            walk(span.span_id, depth + 1)

    walk(root_parent, 1)
    return "\n".join(lines)


def _served(spans: list[Span]) -> list[Span]:
    """The server spans of `spans`, oldest first."""
    served = (s for s in spans if s.kind == ProtoSpan.SPAN_KIND_SERVER)
    return sorted(served, key=lambda s: s.start_ns)


def test_a_request_its_job_event_and_delivery_are_one_trace(
    empty_database_url: str, tmp_path: Path, otlp: tuple[OtlpReceiver, str]
) -> None:
    receiver, otlp_url = otlp
    hooks = Script()
    hook_app = Starlette(routes=[Route("/hook", hooks.endpoint, methods=["POST"])])
    env = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
    assert not env, f"the test sets the OTEL_* variables itself: {env}"
    with ThreadedServer(hook_app) as hook_server:
        server = Server(
            empty_database_url,
            tmp_path / "serve.log",
            USTUN_WEBHOOK_ALLOW_PRIVATE="1",
            USTUN_RATE_LIMIT="0",
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp_url,
            OTEL_SERVICE_NAME="ustun-e2e",
            OTEL_BSP_SCHEDULE_DELAY="100",
        ).start()
        try:
            key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the first API key")
            auth = {"authorization": f"Bearer {key.group()}"}
            with httpx.Client(base_url=server.base_url, headers=auth, timeout=10) as api:
                made = api.post(
                    "/v1/webhook-endpoints",
                    json={"url": f"{hook_server.base_url}/hook", "events": ["job.*"]},
                )
                assert made.status_code == 201, made.text
                trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
                sent = {"traceparent": f"00-{trace_id}-{caller}-01", "idempotency-key": "r-1"}
                report = {"period": "2026", "format": "json"}
                accepted = api.post("/v1/reports", json=report, headers=sent)
                assert accepted.status_code == 202, accepted.text
                replayed = api.post("/v1/reports", json=report, headers=sent)
                assert replayed.headers["idempotent-replayed"] == "true"

            def whole() -> list[Span] | None:
                spans = receiver.of_trace(trace_id)
                names = [s.name for s in spans]
                wanted = {"ustun.job.run", "ustun.webhook.emit", "ustun.webhook.attempt"}
                both = len(_served(spans)) == names.count("ustun.idempotency") == 2
                return spans if wanted <= set(names) and both and hooks.seen else None

            spans = wait_for(whole, timeout=60, what="the request's trace, delivery included")
        finally:
            server.stop()
    print("\n" + render(spans, caller))

    by_id = {s.span_id: s for s in spans}

    def named(name: str) -> list[Span]:
        return sorted((s for s in spans if s.name == name), key=lambda s: s.start_ns)

    # FastAPI's own instrumentation opens the server spans (ustun's middleware joins them); it
    # names the replay, answered before routing, by its method alone.
    requests = _served(spans)
    assert [r.name for r in requests] == ["POST /v1/reports", "POST"]
    assert [r.parent_id for r in requests] == [caller, caller]  # the incoming traceparent
    assert [r.attributes["http.response.status_code"] for r in requests] == [202, 202]
    assert {r.service for r in requests} == {"ustun-e2e"}
    request = requests[0]

    def root(span: Span) -> Span:
        while span.parent_id in by_id:
            span = by_id[span.parent_id]
        return span

    decided = named("ustun.idempotency")
    assert [root(d) for d in decided] == requests
    assert [d.attributes["ustun.idempotency.replayed"] for d in decided] == [False, True]
    [run], [final] = named("ustun.job.run"), named("ustun.job.final")
    assert run.parent_id in by_id  # the job's stored context: a span of the request's
    assert root(run) is request
    assert run.attributes["ustun.job.kind"] == "report"
    assert final.parent_id == run.parent_id
    [emit] = named("ustun.webhook.emit")
    assert emit.parent_id == final.span_id
    assert emit.attributes["ustun.event.type"] == "job.completed"
    [attempt] = named("ustun.webhook.attempt")
    assert attempt.parent_id == emit.span_id  # the event's stored context
    assert attempt.kind == ProtoSpan.SPAN_KIND_CLIENT
    assert attempt.attributes["http.response.status_code"] == 200
    [delivered] = hooks.seen
    assert delivered.headers["traceparent"] == f"00-{trace_id}-{attempt.span_id}-01"
