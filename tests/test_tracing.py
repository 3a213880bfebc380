"""`ustun.tracing`: which `OTEL_*` variables turn it on, off costs no import, a Flask app's
request is a server span whose trace its event and job keep, and a Django app's one too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ustun import tracing


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "shop"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_the_standard_variables_decide(env: dict[str, str], on: bool) -> None:
    assert tracing._decide(env) is on


# Every module that calls a hook, on the paths a request, a job and a delivery take. (FastAPI
# imports the API itself when it is installed: the service's app is left out.)
OFF_PROGRAM = """
import sys
from ustun import tracing
import ustun.service.plumbing.observe, ustun.idempotency.middleware, ustun.store.uow
import ustun.jobs.runner, ustun.webhooks.sending.dispatcher, ustun.webhooks.brokers
assert not tracing.enabled()
parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
with tracing.span("x", parent=parent) as s:
    assert s is None
with tracing.server("GET", [(b"traceparent", parent.encode())]) as s:
    tracing.finish(s, method="GET", route="/", status=200)
headers = {}
tracing.inject(headers)
assert headers == {} and tracing.current_traceparent() is None
tracing.annotate({"a": 1})
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_off_imports_nothing_of_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", OFF_PROGRAM], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


FLASK_PROGRAM = """
import asyncio, sqlite3, sys
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from ustun import tracing
from ustun.flask import Ustun, emit, enqueue
from ustun.store import Database
from ustun.store.migrate import upgrade

path = sys.argv[1]
asyncio.run(upgrade(Database(f"sqlite:///{path}")))
app = Flask(__name__)
app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{path}"
app.config["SECRET_KEY"] = "tracing-test-secret-key-of-32-characters"
db = SQLAlchemy(app)
Ustun(app, db)

@app.post("/orders/<int:order_id>")
def order(order_id):
    emit("order.placed", {"id": order_id}, account="acme")
    enqueue("receipt", {"id": order_id}, account="acme")
    db.session.commit()
    return {"ok": True}, 201

answer = app.test_client().post("/orders/7", headers={"traceparent": sys.argv[2]})
assert answer.status_code == 201, answer.text
with sqlite3.connect(path) as conn:
    for table in ("webhook_events", "jobs"):
        print("STORED", conn.execute(f"SELECT traceparent FROM {table}").fetchone()[0])
tracing.flush()
"""


def _spans(output: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (JSON objects, one after another)."""
    decoder, spans, at = json.JSONDecoder(), [], output.find("{")
    while at != -1:
        span, end = decoder.raw_decode(output, at)
        spans.append(span)
        at = output.find("{", end)
    return spans


# The caller's trace an incoming `traceparent` names: its trace id and its span id.
TRACE_ID, CALLER = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def _traced(program: str, *args: str) -> str:
    """Run `program` in a fresh interpreter with the console span exporter (and no other
    `OTEL_*` variable), given `args` and then the caller's traceparent; its standard output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"
    done = subprocess.run(
        [sys.executable, "-c", program, *args, f"00-{TRACE_ID}-{CALLER}-01"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_flask_request_is_a_server_span_whose_trace_its_event_and_job_keep(
    tmp_path: Path,
) -> None:
    output = _traced(FLASK_PROGRAM, str(tmp_path / "shop.db"))
    lines = output.splitlines()
    stored = [line.split()[1] for line in lines if line.startswith("STORED")]
    spans = _spans("\n".join(line for line in lines if not line.startswith("STORED")))
    [served] = [s for s in spans if s["kind"] == "SpanKind.SERVER"]
    assert served["name"] == "POST /orders/<int:order_id>"
    assert served["parent_id"] == f"0x{CALLER}"  # the incoming traceparent
    assert served["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert served["attributes"]["http.response.status_code"] == 201
    [emitted] = [s for s in spans if s["name"] == "ustun.webhook.emit"]
    assert emitted["parent_id"] == served["context"]["span_id"]
    event_span = emitted["context"]["span_id"].removeprefix("0x")
    # The event keeps its emit span's context; the job the request's server span's.
    server_span = served["context"]["span_id"].removeprefix("0x")
    assert stored == [f"00-{TRACE_ID}-{event_span}-01", f"00-{TRACE_ID}-{server_span}-01"]


DJANGO_PROGRAM = """
import sys
import django
from django.conf import settings
from django.http import HttpResponse
from django.urls import path

def order(request, order_id):
    return HttpResponse(status=201)

urlpatterns = [path("orders/<int:order_id>", order)]
settings.configure(
    ROOT_URLCONF=__name__,
    MIDDLEWARE=["ustun.django.middleware.IdempotencyMiddleware"],
    ALLOWED_HOSTS=["*"],
    SECRET_KEY="tracing-test-secret-key-of-32-characters",
)
django.setup()
from django.test import Client
from ustun import tracing

answer = Client().post("/orders/7", headers={"traceparent": sys.argv[1]})
assert answer.status_code == 201, answer
tracing.flush()
"""


def test_a_django_request_is_a_server_span_named_after_its_url_pattern() -> None:
    [served] = _spans(_traced(DJANGO_PROGRAM))
    assert served["kind"] == "SpanKind.SERVER"
    assert served["name"] == "POST /orders/<int:order_id>"
    assert served["parent_id"] == f"0x{CALLER}"
    assert served["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert served["attributes"]["http.response.status_code"] == 201


ASGI_PROGRAM = """
import asyncio, sys
import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from ustun import tracing
from ustun.idempotency import IdempotencyMiddleware, SqlRecordStore
from ustun.store import Database
from ustun.store.migrate import upgrade

async def order(request):
    return JSONResponse({"ok": True}, status_code=201)

async def main():
    db = Database(f"sqlite:///{sys.argv[1]}")
    await upgrade(db)
    app = Starlette(routes=[Route("/orders", order, methods=["POST"])])
    wrapped = IdempotencyMiddleware(app, store=SqlRecordStore(db), transactional=True)
    sent = {"traceparent": sys.argv[2], "idempotency-key": "k-1"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(wrapped), base_url="http://t") as c:
        for _ in range(2):
            answer = await c.post("/orders", json={}, headers=sent)
            assert answer.status_code == 201, answer.text
    await db.dispose()
    tracing.flush()

asyncio.run(main())
"""


def test_the_asgi_middleware_opens_the_server_span_of_an_app_without_instrumentation(
    tmp_path: Path,
) -> None:
    spans = _spans(_traced(ASGI_PROGRAM, str(tmp_path / "app.db")))
    served = [s for s in spans if s["kind"] == "SpanKind.SERVER"]
    assert [s["parent_id"] for s in served] == [f"0x{CALLER}", f"0x{CALLER}"]
    assert {s["context"]["trace_id"] for s in served} == {f"0x{TRACE_ID}"}
    assert [s["attributes"]["http.response.status_code"] for s in served] == [201, 201]
    decided = [s for s in spans if s["name"] == "ustun.idempotency"]
    assert [d["parent_id"] for d in decided] == [s["context"]["span_id"] for s in served]
    assert [d["attributes"]["ustun.idempotency.replayed"] for d in decided] == [False, True]
